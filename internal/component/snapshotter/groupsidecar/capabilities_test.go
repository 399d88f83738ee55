package groupsidecar

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

// groupPlugin is memdriver announcing the GROUP_CONTROLLER_SERVICE plugin capability too.
type groupPlugin struct{ *csitest.Driver }

func (groupPlugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	for _, s := range []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_CONTROLLER_SERVICE, csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE} {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: s}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// groupCaps answers GroupControllerGetCapabilities with caps, or err, and counts the calls.
type groupCaps struct {
	*fakeGroup
	caps  []csi.GroupControllerServiceCapability_RPC_Type
	err   error
	calls *int
}

func (g groupCaps) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest, ...grpc.CallOption) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	*g.calls++
	if g.err != nil {
		return nil, g.err
	}
	rsp := &csi.GroupControllerGetCapabilitiesResponse{}
	for _, c := range g.caps {
		rsp.Capabilities = append(rsp.Capabilities, &csi.GroupControllerServiceCapability{
			Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{Type: c}}})
	}
	return rsp, nil
}

// The group sidecar runs only for a driver that serves the GroupController with
// CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT, as upstream starts its group controller: that one
// capability covers GetVolumeGroupSnapshot, so a pre-provisioned group content is always
// checked with it (there is no LIST_SNAPSHOTS-like fallback to "ready at once").
func TestSupported(t *testing.T) {
	get := csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
	cases := []struct {
		name         string
		groupService bool
		caps         []csi.GroupControllerServiceCapability_RPC_Type
		err          error
		want, fails  bool
	}{
		{"no GroupController service", false, []csi.GroupControllerServiceCapability_RPC_Type{get}, nil, false, false},
		{"GroupController without group snapshots", true, nil, nil, false, false},
		{"GroupController with group snapshots", true, []csi.GroupControllerServiceCapability_RPC_Type{get}, nil, true, false},
		{"GroupController capabilities fail", true, nil, errors.New("boom"), false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &csitest.Driver{Name: driverName}
			var srv csitest.Server = d
			if tc.groupService {
				srv = groupPlugin{d}
			}
			conn := snaptest.Dial(t, csitest.StartAs(t, d, srv).Address)
			calls := 0
			conn.Group = groupCaps{fakeGroup: &fakeGroup{}, caps: tc.caps, err: tc.err, calls: &calls}
			got, err := Supported(context.Background(), sidecar.ControllerConfig{CSI: conn, DriverName: driverName})
			if (err != nil) != tc.fails || got != tc.want {
				t.Errorf("Supported = %v, %v; want %v, error %v", got, err, tc.want, tc.fails)
			}
			if !tc.groupService && calls != 0 {
				t.Error("GroupControllerGetCapabilities asked of a driver without the GroupController service")
			}
		})
	}
}

// getReady makes the fake's GetVolumeGroupSnapshot report the group (and its members) ready
// or not.
type getReady struct {
	*fakeGroup
	ready *bool
}

func (g getReady) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest, opts ...grpc.CallOption) (*csi.GetVolumeGroupSnapshotResponse, error) {
	rsp, err := g.fakeGroup.GetVolumeGroupSnapshot(ctx, req, opts...)
	if err == nil {
		rsp.GroupSnapshot.ReadyToUse = *g.ready
		for _, s := range rsp.GroupSnapshot.Snapshots {
			s.ReadyToUse = *g.ready
		}
	}
	return rsp, err
}

// A pre-provisioned group the driver reports not ready: the content's status records the
// handle and members, not ready, and the group is asked again until it is ready; no group is
// created for it.
func TestGroupPreProvisionedNotReady(t *testing.T) {
	f := newFixture(t, preProvisionedGroup())
	ready := false
	f.c.cfg.CSI.Group = getReady{f.grp, &ready}
	if err := f.sync(); err != errNotReady {
		t.Fatalf("sync of a group reported not ready = %v, want errNotReady (requeue)", err)
	}
	st := f.get().Status
	if st == nil || ptr.Deref(st.ReadyToUse, false) || ptr.Deref(st.VolumeGroupSnapshotHandle, "") != "pre" || len(st.VolumeSnapshotInfoList) != 2 || ptr.Deref(st.VolumeSnapshotInfoList[0].ReadyToUse, false) {
		t.Fatalf("status = %+v, want handle pre with two members, not ready", st)
	}
	ready = true
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if st := f.get().Status; !ptr.Deref(st.ReadyToUse, false) || !ptr.Deref(st.VolumeSnapshotInfoList[1].ReadyToUse, false) {
		t.Errorf("status = %+v, want ready with ready members", st)
	}
	if len(f.grp.gets) != 2 || len(f.grp.creates) != 0 {
		t.Errorf("GetVolumeGroupSnapshot calls %d, creates %d; want 2 and 0", len(f.grp.gets), len(f.grp.creates))
	}
	if err := f.sync(); err != nil || len(f.grp.gets) != 2 {
		t.Errorf("a ready group was asked again (err %v, %d calls)", err, len(f.grp.gets))
	}
	f.checkVerbs()
}
