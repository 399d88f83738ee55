package driver_test

import (
	"math"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// TestHostileSizes sends the sizes of the overflow report: a CreateVolume of the largest
// int64 (a claim of 8Ei) used to return a volume of negative capacity, after which the
// pool answered every tenant "0 available". Every such ask must be OUT_OF_RANGE, nothing
// negative may be recorded, and the pool must still serve a small volume.
func TestHostileSizes(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{Capacity: 100 << 20})
	c := clients{ctrl: in.Controller, node: in.Node}
	for _, typ := range []string{"dir", "block"} {
		for _, req := range []int64{math.MaxInt64, math.MaxInt64 - 1} {
			_, err := in.Controller.CreateVolume(ctxT(t), createReq("huge-"+typ, typ, req))
			wantCode(t, err, codes.OutOfRange, "CreateVolume of "+typ+" near the int64 limit")
		}
		_, err := in.Controller.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "limit-" + typ,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: math.MaxInt64}, VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
			Parameters: map[string]string{"type": typ}})
		if err != nil {
			t.Errorf("CreateVolume with only a huge limit: %v", err)
		}
	}
	v := c.create(t, "small", "dir", 1<<20)
	_, err := in.Controller.ControllerExpandVolume(ctxT(t), &csi.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: math.MaxInt64}})
	wantCode(t, err, codes.OutOfRange, "ControllerExpandVolume to the int64 limit")
	list, err := in.Controller.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.GetEntries() {
		if b := e.GetVolume().GetCapacityBytes(); b <= 0 || b > 100<<20 && e.GetVolume().GetVolumeContext()["type"] == "dir" {
			t.Errorf("volume %s recorded with %d bytes", e.GetVolume().GetVolumeId(), b)
		}
	}
	c.create(t, "after", "dir", 1<<20)

	for size, code := range map[string]codes.Code{
		"8Ei": codes.OutOfRange, "1e30": codes.OutOfRange, "9223372036854775808": codes.OutOfRange,
		"-1": codes.InvalidArgument, "0": codes.InvalidArgument, "1x": codes.InvalidArgument,
	} {
		_, err := in.Node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: "csi-eph-hostile", TargetPath: in.Path("pods", "hostile"),
			VolumeCapability: mountCap(""), VolumeContext: map[string]string{driver.ContextEphemeral: "true", "size": size}})
		wantCode(t, err, code, "ephemeral size "+size)
	}
}

// TestEphemeralTakesCapacity: inline ephemeral volumes draw on the pool of the state
// directory, so a pod's `size` attribute cannot fill the host, and the controller sees
// what they hold.
func TestEphemeralTakesCapacity(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{Capacity: 100 << 20})
	c := clients{ctrl: in.Controller, node: in.Node}
	publish := func(id, size string) error {
		_, err := in.Node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: in.Path("pods", id),
			VolumeCapability: mountCap(""), VolumeContext: map[string]string{driver.ContextEphemeral: "true", "size": size}})
		return err
	}
	wantCode(t, publish("csi-eph-too-big", "200Mi"), codes.ResourceExhausted, "an ephemeral volume larger than the pool")
	if err := publish("csi-eph-60", "60Mi"); err != nil {
		t.Fatal(err)
	}
	if err := publish("csi-eph-60", "60Mi"); err != nil {
		t.Fatalf("a retried publish counts its own volume twice: %v", err)
	}
	resp, err := in.Controller.GetCapacity(ctxT(t), &csi.GetCapacityRequest{Parameters: map[string]string{"type": "dir"}})
	if err != nil || resp.GetAvailableCapacity() != 40<<20 {
		t.Fatalf("GetCapacity with a 60 MiB ephemeral volume: %v, %v; want %d", resp.GetAvailableCapacity(), err, 40<<20)
	}
	_, err = in.Controller.CreateVolume(ctxT(t), createReq("pvc", "dir", 50<<20))
	wantCode(t, err, codes.ResourceExhausted, "CreateVolume beyond what the ephemeral volume left")
	wantCode(t, publish("csi-eph-50", "50Mi"), codes.ResourceExhausted, "a second ephemeral volume beyond the pool")
	if _, err := in.Node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-eph-60", TargetPath: in.Path("pods", "csi-eph-60")}); err != nil {
		t.Fatal(err)
	}
	c.create(t, "pvc", "dir", 50<<20)
}

// TestSplitPool: a controller process and a node process of one node share the state
// directory and its pool; each reads what the other's records hold from disk.
func TestSplitPool(t *testing.T) {
	drivertest.RequireRoot(t)
	ctrl := drivertest.Start(t, driver.Config{Mode: driver.ModeController, Capacity: 100 << 20})
	node := drivertest.Start(t, driver.Config{Mode: driver.ModeNode, StateDir: ctrl.Config.StateDir, Capacity: 100 << 20})
	publish := func(id, size string) error {
		_, err := node.Node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: node.Path("pods", id),
			VolumeCapability: mountCap(""), VolumeContext: map[string]string{driver.ContextEphemeral: "true", "size": size}})
		return err
	}
	if err := publish("csi-eph-60", "60Mi"); err != nil {
		t.Fatal(err)
	}
	resp, err := ctrl.Controller.GetCapacity(ctxT(t), &csi.GetCapacityRequest{Parameters: map[string]string{"type": "dir"}})
	if err != nil || resp.GetAvailableCapacity() != 40<<20 {
		t.Fatalf("the controller's GetCapacity beside a 60 MiB ephemeral volume: %v, %v; want %d", resp.GetAvailableCapacity(), err, 40<<20)
	}
	clients{ctrl: ctrl.Controller}.create(t, "pvc", "dir", 30<<20)
	wantCode(t, publish("csi-eph-20", "20Mi"), codes.ResourceExhausted, "an ephemeral volume beyond what the controller's volumes left")
	if _, err := node.Node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-eph-60", TargetPath: node.Path("pods", "csi-eph-60")}); err != nil {
		t.Fatal(err)
	}
}

// TestXFSMinimumFromCapability: a block volume whose mount capability asks for xfs (what
// the external-provisioner passes for a class's csi.storage.k8s.io/fstype, which it takes
// out of the parameters) is made at least xfs's minimum size, and stages. A 1 MiB claim
// used to give a 1 MiB image that mkfs.xfs refused at NodeStageVolume, in upstream's
// Dynamic PV (xfs) multiVolume specs.
func TestXFSMinimumFromCapability(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	resp, err := in.Controller.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "xfs-small",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}, VolumeCapabilities: []*csi.VolumeCapability{mountCap("xfs")},
		Parameters: map[string]string{"type": "block"}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	if got := resp.GetVolume().GetCapacityBytes(); got < 16<<20 {
		t.Errorf("xfs volume of a 1 MiB request has %d bytes, below what mkfs.xfs accepts", got)
	}
	staging := in.Path("staging")
	c.stage(t, id, staging, mountCap("xfs"))
	c.unstage(t, id, staging)
	c.delete(t, id)
}
