package lifecycle

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// Online expansion of a mounted xfs volume: the claim grows, the resizer calls
// ControllerExpandVolume and leaves the node's share pending, the node agent calls
// NodeExpandVolume on the live mount, and the bigger filesystem is seen inside the mount
// with the data intact; the claim ends with the new capacity and no resize condition.
// (ext4 cannot grow online here: resize2fs needs CAP_SYS_RESOURCE, which the sandbox drops.)
func TestOnlineExpansionFilesystem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{resizer: true, scParams: map[string]string{"type": "block", "csi.storage.k8s.io/fstype": "xfs"}})
	e.waitRegistered()
	pvc := e.pvcOf("grow", "300Mi", corev1.PersistentVolumeFilesystem)
	pod := e.waitVolumesReady(e.pod("app", kubecheck.ClaimVolume("grow", pvc.Name)))
	pv := e.boundPV(pvc.Name)
	target := filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv.Name, "mount")
	before := fsSize(t, target)
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}

	e.expandClaim(pvc.Name, "600Mi")
	after := fsSize(t, target)
	if after < before+250<<20 {
		t.Errorf("filesystem inside the mount is %d bytes after the expansion, %d before; want about 300 MiB more", after, before)
	}
	if got, err := os.ReadFile(filepath.Join(target, "keep")); err != nil || string(got) != "data" {
		t.Errorf("data after the expansion = %q, %v", got, err)
	}
	e.checkExpansionCalls(pv.Spec.CSI.VolumeHandle)
	e.checkEvent(pod.Namespace, pod.Name, "FileSystemResizeSuccessful")
	e.checkEvent(pvc.Namespace, pvc.Name, "FileSystemResizeSuccessful")

	e.deletePod(pod)
	e.deleteClaim(pvc.Name, pv.Name)
}

// Online expansion of a raw block volume in use through volumeDevices: the device the pod
// sees grows.
func TestOnlineExpansionBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{resizer: true, scParams: map[string]string{"type": "block"}})
	e.waitRegistered()
	pvc := e.pvcOf("grow", "16Mi", corev1.PersistentVolumeBlock)
	pod := e.waitVolumesReady(e.podWith("app", nil, []corev1.Volume{kubecheck.ClaimVolume("grow", pvc.Name)}))
	pv := e.boundPV(pvc.Name)
	link := e.checkMapped(pod, pv.Name)
	if got := deviceSize(t, link); got != 16<<20 {
		t.Fatalf("device size = %d, want %d", got, 16<<20)
	}
	e.expandClaim(pvc.Name, "32Mi")
	if got := deviceSize(t, link); got != 32<<20 {
		t.Errorf("device size after the expansion = %d, want %d", got, 32<<20)
	}
	e.checkExpansionCalls(pv.Spec.CSI.VolumeHandle)

	e.deletePod(pod)
	e.deleteClaim(pvc.Name, pv.Name)
}

// expandClaim asks for size and waits for the expansion to finish (framework.ExpandClaim);
// status.allocatedResources and the PV have the new size.
func (e *env) expandClaim(claim, size string) {
	e.t.Helper()
	last := framework.ExpandClaim(e.ctx, e.t, e.cs, e.ns, claim, size)
	want := resource.MustParse(size)
	if got := last.Status.AllocatedResources[corev1.ResourceStorage]; got.Cmp(want) != 0 {
		e.t.Errorf("status.allocatedResources = %s, want %s", got.String(), size)
	}
	pv := e.boundPV(claim)
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(want) < 0 {
		e.t.Errorf("PV capacity = %s, want at least %s", got.String(), size)
	}
}

// checkExpansionCalls checks that the controller expanded the volume before the node did,
// both after the volume was published.
func (e *env) checkExpansionCalls(handle string) {
	e.t.Helper()
	seq := e.succeeded(handle)
	if err := inOrder(seq, []string{"NodePublishVolume", "ControllerExpandVolume", "NodeExpandVolume"}); err != nil {
		e.t.Errorf("driver calls on %s: %v; calls: %v", handle, err, seq)
	}
}

// checkEvent waits for an event of the given reason on the named object.
func (e *env) checkEvent(ns, name, reason string) {
	e.t.Helper()
	framework.WaitForEvent(e.ctx, e.t, e.cs, ns, name, "event "+reason+" on "+name, 3*time.Minute, kubecheck.EventWith(reason, ""))
}

func fsSize(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

func deviceSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
