package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// TestFaultShadow: with NodePublishVolume:shadow a write through the target does not reach
// the volume, and the unpublish leaves no mount behind.
func TestFaultShadow(t *testing.T) {
	drivertest.RequireRoot(t)
	rules, err := driver.ParseFaults("NodePublishVolume:shadow")
	if err != nil {
		t.Fatal(err)
	}
	in := drivertest.Start(t, driver.Config{NodeID: "n1", Faults: rules, Logger: logr.Discard()})
	vc := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	ctx := context.Background()
	rsp, err := in.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id, staging, target := rsp.GetVolume().GetVolumeId(), in.Path("staging"), in.Path("target")
	if _, err := in.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: vc}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "proof"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(staging, "proof")); !os.IsNotExist(err) {
		t.Errorf("the write through a shadowed target reached the volume: %v", err)
	}
	if _, err := in.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if left, _ := drivertest.Leftovers(in.Dir); len(left) > 0 {
		t.Errorf("left after the unpublish: %v", left)
	}
}
