package driver_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/driver"
	"github.com/kubevol/kubevol/internal/driver/drivertest"
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
