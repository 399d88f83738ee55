package driver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/wait"
	mount "k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// mountOptions returns the per-mount options of the mount at target.
func mountOptions(t *testing.T, target string) []string {
	t.Helper()
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var opts []string
	for _, mi := range infos {
		if mi.MountPoint == filepath.Clean(target) {
			opts = mi.MountOptions // the last one listed is the topmost
		}
	}
	if opts == nil {
		t.Fatalf("nothing mounted at %s", target)
	}
	return opts
}

// checkWritable asserts that a write through target succeeds or fails with EROFS.
func checkWritable(t *testing.T, target string, want bool) {
	t.Helper()
	err := os.WriteFile(filepath.Join(target, "probe"), []byte("x"), 0o644)
	switch {
	case want && err != nil:
		t.Fatalf("write through %s: %v, want it to work", target, err)
	case !want && !errors.Is(err, syscall.EROFS):
		t.Fatalf("write through %s: %v, want EROFS", target, err)
	}
	if ro := slices.Contains(mountOptions(t, target), "ro"); ro == want {
		t.Fatalf("mount options of %s: %v, read-only %v", target, mountOptions(t, target), !want)
	}
}

// The readOnly mutable parameter is enforced on the node: at publish when the volume was
// created with it, and live on a volume already published when ControllerModifyVolume
// changes it, back and forth; bad parameters are INVALID_ARGUMENT and change nothing.
func TestModifyVolumeReadOnly(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	caps, err := c.ctrl.ControllerGetCapabilities(ctxT(t), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasControllerCap(caps, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME) {
		t.Fatal("MODIFY_VOLUME not advertised")
	}

	for _, bad := range []map[string]string{{"readOnly": "maybe"}, {"iops": "3000"}} {
		req := createReq("bad", "dir", 1<<20)
		req.MutableParameters = bad
		_, err := c.ctrl.CreateVolume(ctxT(t), req)
		wantCode(t, err, codes.InvalidArgument, "CreateVolume with mutable parameters "+bad["readOnly"]+bad["iops"])
	}

	req := createReq("ro-at-create", "dir", 1<<20)
	req.MutableParameters = map[string]string{"readOnly": "true"}
	rsp, err := c.ctrl.CreateVolume(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	id := rsp.GetVolume().GetVolumeId()
	staging, target := in.Path("staging", "a"), in.Path("pods", "a")
	c.stage(t, id, staging, mountCap(""))
	c.publish(t, id, staging, target, mountCap(""))
	checkWritable(t, target, false)

	modify := func(p map[string]string) error {
		_, err := c.ctrl.ControllerModifyVolume(ctxT(t), &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: p})
		return err
	}
	// The CO's metadata keys (--extra-modify-metadata) are accepted.
	if err := modify(map[string]string{"readOnly": "false", "csi.storage.k8s.io/pvc/name": "data"}); err != nil {
		t.Fatal(err)
	}
	checkWritable(t, target, true)
	wantCode(t, modify(map[string]string{"readOnly": "yes"}), codes.InvalidArgument, "a bad value")
	wantCode(t, modify(map[string]string{"throughput": "1"}), codes.InvalidArgument, "an unknown key")
	checkWritable(t, target, true)
	if err := modify(map[string]string{"readOnly": "true"}); err != nil {
		t.Fatal(err)
	}
	checkWritable(t, target, false)
	got, err := c.ctrl.ControllerGetVolume(ctxT(t), &csi.ControllerGetVolumeRequest{VolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	if ctx := got.GetVolume().GetVolumeContext(); ctx["readOnly"] != "true" || ctx["csi.storage.k8s.io/pvc/name"] != "" {
		t.Errorf("ControllerGetVolume volume_context = %v, want readOnly=true and no CO metadata", ctx)
	}
	// Idempotent: the same parameters again change nothing and succeed.
	if err := modify(map[string]string{"readOnly": "true"}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, func() error {
		_, err := c.ctrl.ControllerModifyVolume(ctxT(t), &csi.ControllerModifyVolumeRequest{VolumeId: "v-unknown", MutableParameters: map[string]string{"readOnly": "true"}})
		return err
	}(), codes.NotFound, "an unknown volume")
	c.unpublish(t, id, target)
	c.unstage(t, id, staging)
	c.delete(t, id)
}

// In a split deployment (a controller process and a node process over its state, as
// deploy/ runs them) ControllerModifyVolume cannot reach the node's publishes: the node
// process follows the controller's record and turns a live publish read-only, and back.
func TestModifyVolumeReadOnlySplit(t *testing.T) {
	drivertest.RequireRoot(t)
	ctrl := drivertest.Start(t, driver.Config{Mode: driver.ModeController})
	node := drivertest.Start(t, driver.Config{Mode: driver.ModeNode, ControllerStateDir: ctrl.Config.StateDir})
	c := clients{ctrl: ctrl.Controller, node: node.Node}
	id := c.create(t, "split", "dir", 1<<20).GetVolumeId()
	staging, target := node.Path("staging", "a"), node.Path("pods", "a")
	c.stage(t, id, staging, mountCap(""))
	c.publish(t, id, staging, target, mountCap(""))
	checkWritable(t, target, true)
	for _, ro := range []bool{true, false} {
		if _, err := c.ctrl.ControllerModifyVolume(ctxT(t), &csi.ControllerModifyVolumeRequest{VolumeId: id,
			MutableParameters: map[string]string{"readOnly": strconv.FormatBool(ro)}}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctxT(t), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return slices.Contains(mountOptions(t, target), "ro") == ro, nil
		}); err != nil {
			t.Fatalf("the node's publish did not follow readOnly=%v: options %v", ro, mountOptions(t, target))
		}
		checkWritable(t, target, !ro)
	}
	// The node process may still hold the volume for the change it just applied, and
	// answers ABORTED meanwhile, which a CO retries.
	retryAborted(t, "NodeUnpublishVolume", func() error {
		_, err := c.node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		return err
	})
	c.unstage(t, id, staging)
	c.delete(t, id)
}

// --without modify: no capability, UNIMPLEMENTED, and mutable_parameters refused.
func TestWithoutModify(t *testing.T) {
	in := drivertest.Start(t, driver.Config{Without: []string{driver.WithoutModify}})
	caps, err := in.Controller.ControllerGetCapabilities(ctxT(t), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hasControllerCap(caps, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME) {
		t.Error("MODIFY_VOLUME advertised --without modify")
	}
	_, err = in.Controller.ControllerModifyVolume(ctxT(t), &csi.ControllerModifyVolumeRequest{VolumeId: "v-x", MutableParameters: map[string]string{"readOnly": "true"}})
	wantCode(t, err, codes.Unimplemented, "ControllerModifyVolume --without modify")
	req := createReq("m", "dir", 1<<20)
	req.MutableParameters = map[string]string{"readOnly": "true"}
	_, err = in.Controller.CreateVolume(ctxT(t), req)
	wantCode(t, err, codes.InvalidArgument, "mutable_parameters --without modify")
}

func hasControllerCap(rsp *csi.ControllerGetCapabilitiesResponse, want csi.ControllerServiceCapability_RPC_Type) bool {
	for _, c := range rsp.GetCapabilities() {
		if c.GetRpc().GetType() == want {
			return true
		}
	}
	return false
}
