package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The call log keeps a stage's or publish's context= mount flag, as the CO passed it, and
// no other mount flag.
func TestCallLogKeepsOnlyTheSELinuxContext(t *testing.T) {
	capability := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
		MountFlags: []string{"noatime", `context="system_u:object_r:container_file_t:s0:c1,c2"`, "password=hunter2"}}}}
	for _, method := range []string{"NodeStageVolume", "NodePublishVolume"} {
		var req any = &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/t", VolumeCapability: capability}
		if method == "NodeStageVolume" {
			req = &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s", VolumeCapability: capability}
		}
		r := describe(method, req)
		if want := `"system_u:object_r:container_file_t:s0:c1,c2"`; r.SELinuxContext != want {
			t.Errorf("%s: seLinuxContext %q, want %q", method, r.SELinuxContext, want)
		}
	}
	r := describe("NodeExpandVolume", &csi.NodeExpandVolumeRequest{VolumeId: "v", VolumeCapability: capability})
	if r.SELinuxContext != "" {
		t.Errorf("NodeExpandVolume: seLinuxContext %q, want none", r.SELinuxContext)
	}
	if r := describe("NodePublishVolume", &csi.NodePublishVolumeRequest{VolumeId: "v"}); r != (CallRecord{Method: "NodePublishVolume", VolumeID: "v"}) {
		t.Errorf("a publish without a capability: %+v", r)
	}
}
