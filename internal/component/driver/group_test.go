package driver_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// TestGroupSnapshots drives the GroupController: a group of two volumes is taken once by
// name, its members restore the data as it was, a member cannot be deleted alone, a delete
// with the wrong member list is refused, and the delete removes every copy. A driver
// started --without group-snapshots offers none of it.
func TestGroupSnapshots(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	gc := csi.NewGroupControllerClient(in.Conn)
	caps, err := gc.GroupControllerGetCapabilities(ctxT(t), &csi.GroupControllerGetCapabilitiesRequest{})
	if err != nil || caps.GetCapabilities()[0].GetRpc().GetType() != csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT {
		t.Fatalf("GroupControllerGetCapabilities: %v %v", caps, err)
	}
	a, b := c.create(t, "a", "dir", 1<<20), c.create(t, "b", "dir", 1<<20)
	data := func(id string) string { return filepath.Join(in.Config.StateDir, "volumes", id, "f") }
	write := func(id, s string) {
		if err := os.WriteFile(data(id), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a.GetVolumeId(), "a1")
	write(b.GetVolumeId(), "b1")
	req := &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{b.GetVolumeId(), a.GetVolumeId()}}
	resp, err := gc.CreateVolumeGroupSnapshot(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	grp := resp.GetGroupSnapshot()
	if len(grp.GetSnapshots()) != 2 || !grp.GetReadyToUse() {
		t.Fatalf("group: %v", grp)
	}
	again, err := gc.CreateVolumeGroupSnapshot(ctxT(t), req)
	if err != nil || again.GetGroupSnapshot().GetGroupSnapshotId() != grp.GetGroupSnapshotId() {
		t.Fatalf("repeated CreateVolumeGroupSnapshot: %v %v", again, err)
	}
	_, err = gc.CreateVolumeGroupSnapshot(ctxT(t), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a.GetVolumeId()}})
	wantCode(t, err, codes.AlreadyExists, "the name again with other volumes")
	write(a.GetVolumeId(), "a2")
	write(b.GetVolumeId(), "b2")
	var ids []string
	for _, sn := range grp.GetSnapshots() {
		ids = append(ids, sn.GetSnapshotId())
		if sn.GetGroupSnapshotId() != grp.GetGroupSnapshotId() || !sn.GetCreationTime().AsTime().Equal(grp.GetCreationTime().AsTime()) {
			t.Fatalf("member %v of group %v", sn, grp)
		}
		_, err := c.ctrl.DeleteSnapshot(ctxT(t), &csi.DeleteSnapshotRequest{SnapshotId: sn.GetSnapshotId()})
		wantCode(t, err, codes.InvalidArgument, "DeleteSnapshot of a member")
		r, err := c.ctrl.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "restore-" + sn.GetSnapshotId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap("")}, Parameters: map[string]string{"type": "dir"},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: sn.GetSnapshotId()}}}})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(data(r.GetVolume().GetVolumeId()))
		want := map[string]string{a.GetVolumeId(): "a1", b.GetVolumeId(): "b1"}[sn.GetSourceVolumeId()]
		if string(got) != want {
			t.Fatalf("restored %s: %q, want %q", sn.GetSourceVolumeId(), got, want)
		}
	}
	get, err := gc.GetVolumeGroupSnapshot(ctxT(t), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids})
	if err != nil || len(get.GetGroupSnapshot().GetSnapshots()) != 2 {
		t.Fatalf("GetVolumeGroupSnapshot: %v %v", get, err)
	}
	_, err = gc.DeleteVolumeGroupSnapshot(ctxT(t), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids[:1]})
	wantCode(t, err, codes.InvalidArgument, "DeleteVolumeGroupSnapshot with a member missing")
	slices.Reverse(ids)
	for range 2 {
		if _, err := gc.DeleteVolumeGroupSnapshot(ctxT(t), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = gc.GetVolumeGroupSnapshot(ctxT(t), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids})
	wantCode(t, err, codes.NotFound, "GetVolumeGroupSnapshot after the delete")
	left, err := os.ReadDir(filepath.Join(in.Config.StateDir, "snapshots"))
	if err != nil || len(left) != 0 {
		t.Fatalf("snapshot copies left after the delete: %v %v", left, err)
	}

	off := drivertest.Start(t, driver.Config{Without: []string{driver.WithoutGroupSnapshots}})
	_, err = csi.NewGroupControllerClient(off.Conn).GroupControllerGetCapabilities(ctxT(t), &csi.GroupControllerGetCapabilitiesRequest{})
	wantCode(t, err, codes.Unimplemented, "GroupControllerGetCapabilities --without group-snapshots")
}
