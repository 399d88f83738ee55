package resizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// vac creates a VolumeAttributesClass of the test's driver; the test's cleanup deletes it.
func (e *env) vac(suffix string, params map[string]string) string {
	e.t.Helper()
	return framework.AttributesClass(e.ctx, e.t, e.cs, strings.TrimSuffix(e.driver, ".kubevol.io")+"-"+suffix, e.driver, params)
}

func (e *env) patchClass(name, class string) {
	e.t.Helper()
	framework.PatchClaimClass(e.ctx, e.t, e.cs, e.ns, name, class)
}

var modifiedTo = kubecheck.ModifiedTo

// publish stages and publishes the volume on the driver's node service as the kubelet
// would, and returns the target; the cleanup undoes both before the claim goes.
func (e *env) publish(handle string) string {
	e.t.Helper()
	staging, target := filepath.Join(e.dir, "staging"), filepath.Join(e.dir, "target")
	vc := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
	node := e.drv.Conn.Node
	if _, err := node.NodeStageVolume(e.ctx, &csi.NodeStageVolumeRequest{VolumeId: handle, StagingTargetPath: staging, VolumeCapability: vc}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_, _ = node.NodeUnstageVolume(e.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging})
	})
	if _, err := node.NodePublishVolume(e.ctx, &csi.NodePublishVolumeRequest{VolumeId: handle, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_, _ = node.NodeUnpublishVolume(e.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: target})
	})
	return target
}

// writable checks, on the node, what the published mount allows: a write and the mount's
// read-only flag in the mount table.
func (e *env) writable(target string, want bool) {
	e.t.Helper()
	err := os.WriteFile(filepath.Join(target, "probe"), []byte("x"), 0o644)
	if want && err != nil {
		e.t.Fatalf("write through the mount: %v, want it to work", err)
	}
	if !want && !errors.Is(err, syscall.EROFS) {
		e.t.Fatalf("write through the mount: %v, want EROFS", err)
	}
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		e.t.Fatal(err)
	}
	var opts []string
	for _, mi := range infos {
		if mi.MountPoint == target {
			opts = mi.MountOptions
		}
	}
	if slices.Contains(opts, "ro") == want {
		e.t.Fatalf("mount options of %s: %v, want read-only %v", target, opts, !want)
	}
}

// A claim edit (kubectl patch of spec.volumeAttributesClassName) modifies the volume: the
// driver's readOnly parameter reaches the live mount on the node, the claim and the PV name
// the class. An infeasible class is Infeasible and changes nothing; going back to the
// current class rolls it back; the next class applies live again.
func TestModifyVolumeClass(t *testing.T) {
	// --mode all: the test is also the volume's kubelet.
	e := newEnv(t, "--mode", "all")
	sc := e.class(map[string]string{"type": "dir"})
	rw := e.vac("rw", map[string]string{driver.MutableReadOnly: "false"})
	ro := e.vac("ro", map[string]string{driver.MutableReadOnly: "true"})
	bad := e.vac("bad", map[string]string{driver.MutableReadOnly: "maybe"})
	_, pv := e.boundClaim("data", sc, "64Mi")
	target := e.publish(pv.Spec.CSI.VolumeHandle)
	e.writable(target, true)

	e.patchClass("data", ro)
	e.waitClaim("data", "modified to "+ro, modifiedTo(ro))
	if got := ptr.Deref(e.pv(pv.Name).Spec.VolumeAttributesClassName, ""); got != ro {
		t.Errorf("PV class = %q, want %q", got, ro)
	}
	e.writable(target, false)
	e.waitEvent("data", "kubevol-resizer", "VolumeModify")
	e.waitEvent("data", "kubevol-resizer", "VolumeModifySuccessful")

	e.patchClass("data", bad)
	got := e.waitClaim("data", "Infeasible", func(c *corev1.PersistentVolumeClaim) bool {
		return c.Status.ModifyVolumeStatus != nil && c.Status.ModifyVolumeStatus.Status == corev1.PersistentVolumeClaimModifyVolumeInfeasible
	})
	if got.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName != bad || ptr.Deref(got.Status.CurrentVolumeAttributesClassName, "") != ro {
		t.Errorf("status = %+v, want target %s, current %s", got.Status, bad, ro)
	}
	var cond *corev1.PersistentVolumeClaimCondition
	for i, c := range got.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimVolumeModifyVolumeError {
			cond = &got.Status.Conditions[i]
		}
	}
	if cond == nil || !strings.Contains(cond.Message, "InvalidArgument") {
		t.Errorf("conditions = %+v, want ModifyVolumeError with the driver's InvalidArgument", got.Status.Conditions)
	}
	e.waitEvent("data", "kubevol-resizer", "VolumeModifyFailed")
	if got := e.calls("ControllerModifyVolume", pv.Spec.CSI.VolumeHandle); !slices.Contains(got, "ControllerModifyVolume:InvalidArgument") {
		t.Errorf("driver calls: %v, want the refused one", got)
	}
	e.writable(target, false)

	e.patchClass("data", ro)
	e.waitClaim("data", "rolled back to "+ro, modifiedTo(ro))
	e.patchClass("data", rw)
	e.waitClaim("data", "modified to "+rw, modifiedTo(rw))
	e.writable(target, true)
	if got := e.calls("ControllerModifyVolume", pv.Spec.CSI.VolumeHandle); len(got) != 4 {
		t.Errorf("driver calls: %v, want ro, bad (refused), the rollback to ro, rw", got)
	}
}

// A driver whose ControllerModifyVolume fails (a fault flag) leaves the claim InProgress with
// ModifyVolumeError and VolumeModifyFailed events, and the resizer retries with backoff
// until the call works; a class that does not exist yet is Pending until it is created.
func TestModifyFailsAndRetries(t *testing.T) {
	e := newEnv(t, "--fault", "ControllerModifyVolume:error=INTERNAL,count=2")
	sc := e.class(map[string]string{"type": "dir"})
	_, pv := e.boundClaim("data", sc, "64Mi")
	later := strings.TrimSuffix(e.driver, ".kubevol.io") + "-later"

	e.patchClass("data", later)
	got := e.waitClaim("data", "Pending", func(c *corev1.PersistentVolumeClaim) bool {
		return c.Status.ModifyVolumeStatus != nil && c.Status.ModifyVolumeStatus.Status == corev1.PersistentVolumeClaimModifyVolumePending
	})
	if got.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName != later {
		t.Errorf("target = %q, want %q", got.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName, later)
	}
	e.vac("later", map[string]string{driver.MutableReadOnly: "true"})
	e.waitEvent("data", "kubevol-resizer", "VolumeModifyFailed")
	e.waitClaim("data", "modified to "+later, modifiedTo(later))
	if got := e.calls("ControllerModifyVolume", pv.Spec.CSI.VolumeHandle); !slices.Equal(got, []string{
		"ControllerModifyVolume:Internal", "ControllerModifyVolume:Internal", "ControllerModifyVolume:OK"}) {
		t.Errorf("driver calls: %v, want two injected failures, then success", got)
	}
}
