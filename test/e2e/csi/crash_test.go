package csi

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kill -9 of the node agent between NodeStage and NodePublish (the driver delays
// NodePublish to widen the window): the restarted agent reconstructs the volume, finds it
// staged and publishes it without a second NodeStage, and teardown leaks no mount.
func TestNodeAgentCrashBetweenStageAndPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{faults: []string{"NodePublishVolume:delay=5s"}})
	e.waitRegistered()
	pvc := e.pvc("data")
	pod := e.pod("app", claimVolume("data", pvc.Name))

	var handle string
	e.poll("NodeStageVolume done", func(context.Context) (bool, error) {
		for _, c := range e.calls() {
			if c.Method == "NodeStageVolume" && c.Code == "OK" {
				handle = c.VolumeID
				return true, nil
			}
		}
		return false, nil
	})
	e.agent.Kill()
	if slices.Contains(e.succeeded(handle), "NodePublishVolume") {
		t.Fatal("NodePublishVolume finished before the agent was killed; the crash window was missed")
	}
	e.agent.Start()

	pod = e.waitVolumesReady(pod)
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(e.ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pvc.Spec.VolumeName, "mount")
	if !isMountPoint(target) {
		t.Fatalf("%s is not a mount point after the restart", target)
	}
	stages := 0
	for _, c := range e.calls() {
		if c.Method == "NodeStageVolume" && c.VolumeID == handle {
			stages++
		}
	}
	if stages != 1 {
		t.Errorf("NodeStageVolume called %d times, want 1; calls: %v", stages, e.succeeded(handle))
	}

	e.deletePod(pod)
	e.deleteClaim(pvc.Name, pvc.Spec.VolumeName)
	if err := inOrder(e.succeeded(handle), []string{"NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}); err != nil {
		t.Errorf("teardown: %v; calls: %v", err, e.succeeded(handle))
	}
	if m := mountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
