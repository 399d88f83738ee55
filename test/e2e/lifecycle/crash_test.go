package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// kill -9 of the node agent between NodeStage and NodePublish (the driver delays
// NodePublish to widen the window): the restarted agent reconstructs the volume, finds it
// staged and publishes it without a second NodeStage, and teardown leaks no mount.
func TestNodeAgentCrashBetweenStageAndPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{faults: []string{"NodePublishVolume:delay=5s"}})
	e.waitRegistered()
	pvc := e.pvc("data")
	pod := e.pod("app", kubecheck.ClaimVolume("data", pvc.Name))

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
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// kill -9 of the node agent while a pod maps a block volume: the restarted agent
// reconstructs it from pods/<uid>/volumeDevices, keeps it mapped, and tears it down in order
// when the pod goes, leaving no link, bind mount or loop device.
func TestNodeAgentRestartWithBlockVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{scParams: map[string]string{"type": "block"}})
	e.waitRegistered()
	pvc := e.pvcOf("raw", "16Mi", corev1.PersistentVolumeBlock)
	pod := e.waitVolumesReady(e.podWith("app", nil, []corev1.Volume{kubecheck.ClaimVolume("raw", pvc.Name)}))
	pv := e.boundPV(pvc.Name)
	handle := pv.Spec.CSI.VolumeHandle
	link := e.checkMapped(pod, pv.Name)

	e.agent.Kill()
	e.agent.Start()
	// The reconstructed volume is set up again (idempotently) for the pod that still wants it.
	e.poll("volume mapped again after the restart", func(context.Context) (bool, error) {
		return count(e.succeeded(handle), "NodePublishVolume") >= 2, nil
	})
	if got := e.checkMapped(pod, pv.Name); got != link {
		t.Errorf("pod link moved from %s to %s", link, got)
	}

	e.deletePod(pod)
	e.deleteClaim(pvc.Name, pv.Name)
	if err := inOrder(e.succeeded(handle), []string{"NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}); err != nil {
		t.Errorf("teardown: %v; calls: %v", err, e.succeeded(handle))
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("pod link %s left: %v", link, err)
	}
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), e.dir) {
		t.Errorf("loop devices left:\n%s", out)
	}
}
