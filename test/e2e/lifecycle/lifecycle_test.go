package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestLifecycleWithoutAttach(t *testing.T) {
	t.Parallel()
	testLifecycle(t, false)
}

func TestLifecycleWithAttach(t *testing.T) {
	t.Parallel()
	testLifecycle(t, true)
}

// A PVC and a pod go through provisioning, binding, scheduling, (attach,) stage and publish;
// data is written through the mount; deleting the pod and then the PVC drives the driver
// through NodeUnpublish, NodeUnstage, (ControllerUnpublish,) DeleteVolume in that order, and
// leaves no mount and no loop device.
func testLifecycle(t *testing.T, attach bool) {
	e := newEnv(t, envOptions{attachRequired: attach})
	e.waitRegistered()
	pvc := e.pvc("data")
	pod := e.waitVolumesReady(e.pod("app", kubecheck.ClaimVolume("data", pvc.Name)))

	pv := e.boundPV(pvc.Name)
	handle := pv.Spec.CSI.VolumeHandle
	volDir := filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv.Name)
	target := filepath.Join(volDir, "mount")
	if !isMountPoint(target) {
		t.Fatalf("%s is not a mount point", target)
	}
	var data map[string]string
	raw, err := os.ReadFile(filepath.Join(volDir, "vol_data.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"specVolumeID": pv.Name, "volumeHandle": handle, "driverName": e.name, "nodeName": e.node, "volumeLifecycleMode": "Persistent"}
	if attach {
		want["attachmentID"] = csiplugin.AttachmentName(handle, e.name, e.node)
	}
	for k, v := range want {
		if data[k] != v {
			t.Errorf("vol_data.json %s = %q, want %q (all: %v)", k, data[k], v, data)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("world"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	// NodeGetVolumeStats reaches the kubelet's metrics.
	body := framework.Get(t, e.metrics)
	series := fmt.Sprintf(`kubelet_volume_stats_capacity_bytes{namespace=%q,persistentvolumeclaim="data"}`, e.ns)
	if !strings.Contains(body, series) {
		t.Errorf("/metrics lacks %s", series)
	}
	unique := corev1.UniqueVolumeName("kubernetes.io/csi/" + e.name + "^" + handle)
	if attach {
		node, err := e.cs.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(node.Status.VolumesInUse, unique) {
			t.Errorf("node.status.volumesInUse = %v, want %s in it", node.Status.VolumesInUse, unique)
		}
		va, err := e.cs.StorageV1().VolumeAttachments().Get(e.ctx, csiplugin.AttachmentName(handle, e.name, e.node), metav1.GetOptions{})
		if err != nil || !va.Status.Attached {
			t.Errorf("VolumeAttachment: %v, attached=%v", err, va != nil && va.Status.Attached)
		}
	}

	e.deletePod(pod)
	if _, err := os.Stat(volDir); !os.IsNotExist(err) {
		t.Errorf("pod volume directory left after teardown: %v", err)
	}
	e.deleteClaim(pvc.Name, pv.Name)
	if attach {
		e.poll("VolumeAttachment gone", func(ctx context.Context) (bool, error) {
			_, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, csiplugin.AttachmentName(handle, e.name, e.node), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}

	seq := e.succeeded(handle)
	order := []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}
	if attach {
		order = []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume", "DeleteVolume"}
	}
	if err := inOrder(seq, order); err != nil {
		t.Errorf("driver calls on %s: %v; calls: %v", handle, err, seq)
	}
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		// Once each: without requiresRepublish nothing is published again.
		if n := count(seq, m); n != 1 {
			t.Errorf("%s succeeded %d times, want 1", m, n)
		}
	}
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), e.dir) {
		t.Errorf("loop devices left:\n%s", out)
	}
}

// inOrder checks that the last occurrence of each step comes after the previous step's.
func inOrder(seq, steps []string) error {
	at := -1
	for _, s := range steps {
		i := slices.Index(seq[at+1:], s)
		if i < 0 {
			return fmt.Errorf("%s missing after position %d", s, at)
		}
		at += 1 + i
	}
	return nil
}

func count(seq []string, s string) int {
	n := 0
	for _, x := range seq {
		if x == s {
			n++
		}
	}
	return n
}
