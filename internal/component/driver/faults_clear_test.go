package driver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

func TestFaultClearsRequestFieldsOnACopy(t *testing.T) {
	rules, err := ParseFaults("NodePublishVolume:clear=volume_capability.mount.mount_flags;NodePublishVolume:clear=readonly")
	if err != nil {
		t.Fatal(err)
	}
	if got := rules[0].String(); got != "NodePublishVolume:clear=volume_capability.mount.mount_flags" {
		t.Errorf("String: %s", got)
	}
	req := &csi.NodePublishVolumeRequest{Readonly: true, VolumeCapability: &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: []string{"noatime"}, FsType: "xfs"}}}}
	f := newFaults(rules)
	got := f.clearFields(context.Background(), "NodePublishVolume", req).(*csi.NodePublishVolumeRequest)
	if got.Readonly || len(got.GetVolumeCapability().GetMount().GetMountFlags()) != 0 || got.GetVolumeCapability().GetMount().GetFsType() != "xfs" {
		t.Errorf("cleared request: %v", got)
	}
	if !req.Readonly || len(req.GetVolumeCapability().GetMount().GetMountFlags()) != 1 {
		t.Errorf("the caller's request was changed: %v", req)
	}
	if other := f.clearFields(context.Background(), "NodeStageVolume", req); other != any(req) {
		t.Error("a call of another method was changed")
	}
	if _, err := ParseFaults("CreateVolume:clear=Bad-Path"); err == nil {
		t.Error("a malformed field path is accepted")
	}
}
