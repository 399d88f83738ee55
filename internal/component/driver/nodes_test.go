package driver_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// TestSeveralNodesOneController: a controller of two nodes' segments (--topology-nodes)
// provisions on the first preferred segment it serves; the volume is the second node's
// alone: its instance (over the controller's state, --controller-state-dir) stages it, the
// first node's refuses it, and so does a ControllerPublishVolume to the first node.
func TestSeveralNodesOneController(t *testing.T) {
	drivertest.RequireRoot(t)
	one := drivertest.Start(t, driver.Config{NodeID: "n1", TopologyNodes: []string{"n2"}, AttachRequired: true, Logger: logr.Discard()})
	two := drivertest.Start(t, driver.Config{NodeID: "n2", Mode: driver.ModeNode, ControllerStateDir: one.Config.StateDir, AttachRequired: true, Logger: logr.Discard()})
	seg := func(n string) *csi.Topology { return &csi.Topology{Segments: map[string]string{driver.TopologyKey: n}} }

	req := createReq("on-n3", "dir", 1<<20)
	req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n3")}}
	_, err := one.Controller.CreateVolume(ctxT(t), req)
	wantCode(t, err, codes.ResourceExhausted, "CreateVolume in a segment the controller does not serve")
	for node, want := range map[string]bool{"n2": true, "n3": false} {
		got, err := one.Controller.GetCapacity(ctxT(t), &csi.GetCapacityRequest{Parameters: map[string]string{"type": "dir"}, AccessibleTopology: seg(node)})
		if err != nil || (got.GetAvailableCapacity() > 0) != want {
			t.Errorf("GetCapacity of segment %s: %v %v", node, got, err)
		}
	}

	for _, typ := range []string{"dir", "block"} {
		req := createReq("on-n2-"+typ, typ, 64<<20)
		req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n1"), seg("n2")}, Preferred: []*csi.Topology{seg("n2"), seg("n1")}}
		rsp, err := one.Controller.CreateVolume(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		v := rsp.GetVolume()
		if got := v.GetAccessibleTopology()[0].GetSegments()[driver.TopologyKey]; got != "n2" {
			t.Fatalf("volume in segment %q, want n2", got)
		}
		vc := mountCap("")
		_, err = one.Controller.ControllerPublishVolume(ctxT(t), &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "n1", VolumeCapability: vc})
		wantCode(t, err, codes.NotFound, "ControllerPublishVolume of n2's volume to n1")
		if _, err := one.Controller.ControllerPublishVolume(ctxT(t), &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "n2", VolumeCapability: vc}); err != nil {
			t.Fatalf("ControllerPublishVolume to n2: %v", err)
		}
		_, err = one.Node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: one.Path("staging-" + typ), VolumeCapability: vc})
		wantCode(t, err, codes.NotFound, "NodeStageVolume of n2's volume on n1")

		c := clients{ctrl: one.Controller, node: two.Node}
		staging, target := two.Path("staging-"+typ), two.Path("target-"+typ)
		c.stage(t, v.GetVolumeId(), staging, vc)
		c.publish(t, v.GetVolumeId(), staging, target, vc)
		c.unpublish(t, v.GetVolumeId(), target)
		c.unstage(t, v.GetVolumeId(), staging)
		if _, err := one.Controller.ControllerUnpublishVolume(ctxT(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "n2"}); err != nil {
			t.Fatal(err)
		}
		c.delete(t, v.GetVolumeId())
	}
}

// TestNetworkVolumes: placement=network volumes of a controller of two nodes have no
// topology and are reachable from both node instances: a "dir" volume is published on both
// at once, multi-node; a raw "block" one shares the machine's loop device, detached only by
// the last node's unstage; a filesystem on a "block" one is refused to the second node while
// the first has it staged, and a single-node attach moves only after the unpublish.
func TestNetworkVolumes(t *testing.T) {
	drivertest.RequireRoot(t)
	one := drivertest.Start(t, driver.Config{NodeID: "n1", TopologyNodes: []string{"n2"}, AttachRequired: true, Logger: logr.Discard()})
	two := drivertest.Start(t, driver.Config{NodeID: "n2", Mode: driver.ModeNode, ControllerStateDir: one.Config.StateDir, AttachRequired: true, Logger: logr.Discard()})
	nodes := map[string]clients{"n1": {ctrl: one.Controller, node: one.Node}, "n2": {ctrl: one.Controller, node: two.Node}}
	path := map[string]func(...string) string{"n1": one.Path, "n2": two.Path}
	multi := func(block bool) *csi.VolumeCapability {
		vc := mountCap("")
		if block {
			vc = blockCap()
		}
		vc.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		return vc
	}
	create := func(name, typ string, vc *csi.VolumeCapability) string {
		req := createReq(name, typ, 64<<20)
		req.Parameters[driver.ParamPlacement] = driver.PlacementNetwork
		req.VolumeCapabilities = []*csi.VolumeCapability{vc}
		rsp, err := one.Controller.CreateVolume(ctxT(t), req)
		if err != nil {
			t.Fatalf("CreateVolume %s: %v", name, err)
		}
		if top := rsp.GetVolume().GetAccessibleTopology(); len(top) != 0 {
			t.Errorf("network volume %s has topology %v, want none", name, top)
		}
		return rsp.GetVolume().GetVolumeId()
	}

	for _, typ := range []string{"dir", "block"} {
		vc := multi(typ == "block")
		id := create("shared-"+typ, typ, vc)
		for _, n := range []string{"n1", "n2"} {
			if _, err := one.Controller.ControllerPublishVolume(ctxT(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: n, VolumeCapability: vc}); err != nil {
				t.Fatalf("ControllerPublishVolume %s to %s: %v", typ, n, err)
			}
			nodes[n].stage(t, id, path[n]("staging-"+typ), vc)
			nodes[n].publish(t, id, path[n]("staging-"+typ), path[n]("target-"+typ), vc)
		}
		if typ == "dir" {
			if err := os.WriteFile(filepath.Join(one.Path("target-dir"), "proof"), []byte("n1"), 0o600); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(two.Path("target-dir"), "proof")); err != nil || string(got) != "n1" {
				t.Errorf("n2 reads %q, %v; want n1's write", got, err)
			}
		}
		nodes["n1"].unpublish(t, id, path["n1"]("target-"+typ))
		nodes["n1"].unstage(t, id, path["n1"]("staging-"+typ))
		if typ == "block" {
			// n1 is gone from the image; n2 still has it staged, on the shared device.
			if left, _ := drivertest.Leftovers(one.Config.StateDir); len(left) == 0 {
				t.Error("n1's unstage detached the loop device n2 still uses")
			}
		}
		nodes["n2"].unpublish(t, id, path["n2"]("target-"+typ))
		nodes["n2"].unstage(t, id, path["n2"]("staging-"+typ))
		for _, n := range []string{"n1", "n2"} {
			if _, err := one.Controller.ControllerUnpublishVolume(ctxT(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: n}); err != nil {
				t.Fatal(err)
			}
		}
		nodes["n1"].delete(t, id)
	}

	vc := mountCap("ext4")
	id := create("exclusive", "block", vc)
	_, err := one.Controller.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "fs-rwx", Parameters: map[string]string{"type": "block", driver.ParamPlacement: driver.PlacementNetwork},
		VolumeCapabilities: []*csi.VolumeCapability{multi(false)}})
	wantCode(t, err, codes.InvalidArgument, "CreateVolume of a multi-node filesystem on a network block volume")
	publish := func(n string) error {
		_, err := one.Controller.ControllerPublishVolume(ctxT(t), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: n, VolumeCapability: vc})
		return err
	}
	if err := publish("n1"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, publish("n2"), codes.FailedPrecondition, "ControllerPublishVolume of a single-node volume published at n1 to n2")
	nodes["n1"].stage(t, id, one.Path("staging-fs"), vc)
	_, err = two.Node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: two.Path("staging-fs"), VolumeCapability: vc})
	wantCode(t, err, codes.FailedPrecondition, "NodeStageVolume on n2 of a filesystem n1 has mounted")
	nodes["n1"].unstage(t, id, one.Path("staging-fs"))
	if _, err := one.Controller.ControllerUnpublishVolume(ctxT(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := publish("n2"); err != nil {
		t.Fatalf("ControllerPublishVolume to n2 after n1's unpublish: %v", err)
	}
	nodes["n2"].stage(t, id, two.Path("staging-fs"), vc)
	nodes["n2"].unstage(t, id, two.Path("staging-fs"))
	if _, err := one.Controller.ControllerUnpublishVolume(ctxT(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n2"}); err != nil {
		t.Fatal(err)
	}
	nodes["n1"].delete(t, id)
}
