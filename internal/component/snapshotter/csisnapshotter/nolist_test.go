package csisnapshotter

import (
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

var createOnly = []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT}

// A driver without LIST_SNAPSHOTS cannot tell the state of a pre-provisioned snapshot, so
// upstream marks the content ready at once: the spec's handle, creationTime now, no restore
// size, a former error cleared, and the driver is asked nothing.
func TestPreProvisionedWithoutListSnapshots(t *testing.T) {
	c := preProvisioned("c1")
	msg := "failed to list snapshot existing-1: unavailable"
	c.Status = &snapv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(false), Error: &snapv1.VolumeSnapshotError{Message: &msg}}
	f := newFixtureCaps(t, createOnly, c)
	if f.c.lists {
		t.Fatal("LIST_SNAPSHOTS assumed of a driver that does not announce it")
	}
	before := time.Now().UnixNano()
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixNano()
	if n := len(f.drv.lists) + len(f.drv.creates); n != 0 {
		t.Errorf("%d CSI calls for a pre-provisioned content of a driver without LIST_SNAPSHOTS", n)
	}
	st := f.get("c1").Status
	switch {
	case st == nil || ptr.Deref(st.SnapshotHandle, "") != "existing-1" || !ptr.Deref(st.ReadyToUse, false):
		t.Fatalf("status = %+v, want handle existing-1, ready", st)
	case st.CreationTime == nil || *st.CreationTime < before || *st.CreationTime > after:
		t.Errorf("creationTime = %v, want the time of the sync", st.CreationTime)
	case st.RestoreSize != nil:
		t.Errorf("restoreSize = %d, want none (unknown)", *st.RestoreSize)
	case st.Error != nil:
		t.Errorf("error %q kept on a ready content", ptr.Deref(st.Error.Message, ""))
	}
	f.checkVerbs()
	f.snap.ClearActions()
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	snaptest.CheckVerbs(t, f.snap.Actions(), "volumesnapshotcontents") // a ready content: reads only
}

// With LIST_SNAPSHOTS, a pre-provisioned snapshot the driver lists as not ready leaves the
// content not ready and is listed again (with backoff) until it is.
func TestPreProvisionedListedNotReady(t *testing.T) {
	f := newFixture(t, preProvisioned("c1"))
	ready := false
	f.drv.listFn = func(req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
		return &csi.ListSnapshotsResponse{Entries: []*csi.ListSnapshotsResponse_Entry{{Snapshot: &csi.Snapshot{SnapshotId: req.SnapshotId, ReadyToUse: ready}}}}, nil
	}
	if err := f.sync("c1"); err != errNotReady {
		t.Fatalf("sync of a snapshot listed not ready = %v, want errNotReady", err)
	}
	if st := f.get("c1").Status; st == nil || ptr.Deref(st.ReadyToUse, false) || ptr.Deref(st.SnapshotHandle, "") != "existing-1" {
		t.Fatalf("status = %+v, want handle existing-1, not ready", st)
	}
	ready = true
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.lists) != 2 || !ptr.Deref(f.get("c1").Status.ReadyToUse, false) {
		t.Errorf("ListSnapshots calls %d, ready %v: want 2 and ready", len(f.drv.lists), ptr.Deref(f.get("c1").Status.ReadyToUse, false))
	}
}

// A dynamic content of a driver without LIST_SNAPSHOTS: its readiness comes from CreateSnapshot,
// repeated under the same name until the driver reports it ready (upstream never lists a
// dynamic snapshot, whatever the driver's capabilities).
func TestDynamicWithoutListSnapshots(t *testing.T) {
	f := newFixtureCaps(t, createOnly, dynamic("c1", snapv1.VolumeSnapshotContentDelete))
	ready := false
	f.drv.createFn = func(req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
		return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: "h1", SourceVolumeId: req.SourceVolumeId, ReadyToUse: ready}}, nil
	}
	if err := f.sync("c1"); err != errNotReady {
		t.Fatalf("sync = %v, want errNotReady", err)
	}
	if st := f.get("c1").Status; st == nil || ptr.Deref(st.ReadyToUse, false) {
		t.Fatalf("status = %+v, want not ready", st)
	}
	ready = true
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	switch {
	case len(f.drv.lists) != 0:
		t.Errorf("ListSnapshots called %d times for a dynamic content", len(f.drv.lists))
	case len(f.drv.creates) != 2 || f.drv.creates[0].Name != f.drv.creates[1].Name:
		t.Errorf("CreateSnapshot calls %d, want 2 under one name", len(f.drv.creates))
	case !ptr.Deref(f.get("c1").Status.ReadyToUse, false):
		t.Error("content not ready after CreateSnapshot reported it ready")
	}
}
