package driver_test

import (
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// A read-only publish under a shared mount is read-only in its peers too, as a driver in a
// container sees it: its pods directory is a peer of the host's (Bidirectional), and the
// kubelet gives the pod the host's copy of the mount. A publish read-only from the start,
// and one made read-only later by ControllerModifyVolume.
func TestReadOnlyPublishPropagatesReadOnly(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	shared, peer := in.Path("shared"), in.Path("peer")
	for _, d := range []string{shared, peer} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", shared, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(shared, unix.MNT_DETACH) })
	if err := unix.Mount("", shared, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(shared, peer, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(peer, unix.MNT_DETACH) })

	vol := c.create(t, "ro-shared", "dir", 1<<20)
	staging := in.Path("staging", "ro-shared")
	c.stage(t, vol.GetVolumeId(), staging, mountCap(""))
	if _, err := c.node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: vol.GetVolumeId(), StagingTargetPath: staging,
		TargetPath: shared + "/pod", VolumeCapability: mountCap(""), Readonly: true}); err != nil {
		t.Fatal(err)
	}
	checkWritable(t, shared+"/pod", false)
	checkWritable(t, peer+"/pod", false)

	// A live publish made read-only by ControllerModifyVolume, and writable again: in the
	// peer too.
	c.unpublish(t, vol.GetVolumeId(), shared+"/pod")
	c.publish(t, vol.GetVolumeId(), staging, shared+"/pod2", mountCap(""))
	checkWritable(t, peer+"/pod2", true)
	for _, ro := range []string{"true", "false", "true"} {
		if _, err := c.ctrl.ControllerModifyVolume(ctxT(t), &csi.ControllerModifyVolumeRequest{VolumeId: vol.GetVolumeId(),
			MutableParameters: map[string]string{"readOnly": ro}}); err != nil {
			t.Fatal(err)
		}
		checkWritable(t, shared+"/pod2", ro == "false")
		checkWritable(t, peer+"/pod2", ro == "false")
	}
	c.unpublish(t, vol.GetVolumeId(), shared+"/pod2")
	c.unstage(t, vol.GetVolumeId(), staging)
	c.delete(t, vol.GetVolumeId())
	if err := unix.Access(shared+"/pod2", unix.F_OK); err == nil {
		t.Error("the modified publish's target is left")
	}
}
