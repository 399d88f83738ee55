package groupsidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	grouplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumegroupsnapshot/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

const driverName = "fake.csi.kubevol.io"

// fakeGroup is an in-process GroupController client: memdriver serves no GroupController,
// so the connection's Group client is replaced by this one, which records the requests.
type fakeGroup struct {
	snap     *snapfake.Clientset
	creates  []*csi.CreateVolumeGroupSnapshotRequest
	deletes  []*csi.DeleteVolumeGroupSnapshotRequest
	gets     []*csi.GetVolumeGroupSnapshotRequest
	createFn func(*csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error)
	// beingCreated records, at each create, whether the stored content had the annotation.
	beingCreated []bool
}

func (g *fakeGroup) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest, ...grpc.CallOption) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{}, nil
}

func (g *fakeGroup) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest, _ ...grpc.CallOption) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	g.creates = append(g.creates, req)
	cur, err := g.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, "g1", metav1.GetOptions{})
	g.beingCreated = append(g.beingCreated, err == nil && cur.Annotations[snapshotter.AnnGroupBeingCreated] == "yes")
	if g.createFn != nil {
		return g.createFn(req)
	}
	var snaps []*csi.Snapshot
	for _, v := range req.SourceVolumeIds {
		snaps = append(snaps, &csi.Snapshot{SnapshotId: "s-" + v, SourceVolumeId: v, SizeBytes: 1 << 20, ReadyToUse: true})
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: &csi.VolumeGroupSnapshot{GroupSnapshotId: "grp-" + req.Name, Snapshots: snaps, ReadyToUse: true}}, nil
}

func (g *fakeGroup) DeleteVolumeGroupSnapshot(_ context.Context, req *csi.DeleteVolumeGroupSnapshotRequest, _ ...grpc.CallOption) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	g.deletes = append(g.deletes, req)
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

func (g *fakeGroup) GetVolumeGroupSnapshot(_ context.Context, req *csi.GetVolumeGroupSnapshotRequest, _ ...grpc.CallOption) (*csi.GetVolumeGroupSnapshotResponse, error) {
	g.gets = append(g.gets, req)
	var snaps []*csi.Snapshot
	for _, id := range req.SnapshotIds {
		snaps = append(snaps, &csi.Snapshot{SnapshotId: id, SourceVolumeId: "vol-of-" + id, ReadyToUse: true})
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: &csi.VolumeGroupSnapshot{GroupSnapshotId: req.GroupSnapshotId, Snapshots: snaps, ReadyToUse: true}}, nil
}

type fixture struct {
	t    *testing.T
	ctx  context.Context
	c    *Controller
	snap *snapfake.Clientset
	grp  *fakeGroup
	rec  *record.FakeRecorder
}

func newFixture(t *testing.T, content *groupv1.VolumeGroupSnapshotContent) *fixture {
	t.Helper()
	drv := csitest.Start(t, &csitest.Driver{Name: driverName})
	conn := snaptest.Dial(t, drv.Address)
	class := &groupv1.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "gcls"}, Driver: driverName,
		DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Parameters: map[string]string{"consistency": "crash"}}
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	snap := snapfake.NewSimpleClientset(class, content)
	grp := &fakeGroup{snap: snap}
	conn.Group = grp
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := New(ctx, Config{ControllerConfig: sidecar.ControllerConfig{Client: fake.NewClientset(), CSI: conn, DriverName: driverName},
		Snap: snap, ExtraCreateMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	c.stopEvents()
	f := &fixture{t: t, ctx: ctx, c: c, snap: snap, grp: grp, rec: record.NewFakeRecorder(100)}
	c.recorder = f.rec
	snap.ClearActions()
	return f
}

func (f *fixture) sync() error {
	f.t.Helper()
	vgsc, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cl, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.c.contents = grouplisters.NewVolumeGroupSnapshotContentLister(snaptest.Indexer(f.t, vgsc.Items))
	f.c.classes = grouplisters.NewVolumeGroupSnapshotClassLister(snaptest.Indexer(f.t, cl.Items))
	return f.c.sync(f.ctx, "g1")
}

func (f *fixture) get() *groupv1.VolumeGroupSnapshotContent {
	f.t.Helper()
	return snaptest.MustGet(f.t, f.ctx, f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents(), "g1")
}

// checkVerbs fails on a write to volumegroupsnapshotcontents other than update and patch (of the object and
// its status), the verbs upstream's RBAC grants the group sidecar.
func (f *fixture) checkVerbs() {
	f.t.Helper()
	snaptest.CheckVerbs(f.t, f.snap.Actions(), "volumegroupsnapshotcontents", "update", "patch")
}

func dynamic() *groupv1.VolumeGroupSnapshotContent {
	return &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: "g1", Finalizers: []string{snapshotter.FinalizerGroupContentBound}, Annotations: map[string]string{}},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef:       corev1.ObjectReference{Namespace: "default", Name: "grp", UID: "9999-ffff"},
			DeletionPolicy:               snapv1.VolumeSnapshotContentDelete,
			Driver:                       driverName,
			VolumeGroupSnapshotClassName: ptr.To("gcls"),
			Source:                       groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: []string{"vol-a", "vol-b"}},
		},
	}
}

func TestGroupDynamicCreate(t *testing.T) {
	f := newFixture(t, dynamic())
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.creates) != 1 {
		t.Fatalf("CreateVolumeGroupSnapshot calls = %d, want 1", len(f.grp.creates))
	}
	req := f.grp.creates[0]
	if req.Name != "groupsnapshot-9999-ffff" || strings.Join(req.SourceVolumeIds, ",") != "vol-a,vol-b" {
		t.Errorf("request name/volumes = %q/%v", req.Name, req.SourceVolumeIds)
	}
	if req.Parameters["consistency"] != "crash" || req.Parameters[paramGroupName] != "grp" || req.Parameters[paramContentName] != "g1" {
		t.Errorf("parameters = %v, want the class's and the extra metadata", req.Parameters)
	}
	if len(f.grp.beingCreated) != 1 || !f.grp.beingCreated[0] {
		t.Errorf("being-created annotation not stored before CreateVolumeGroupSnapshot")
	}
	got := f.get()
	if _, ok := got.Annotations[snapshotter.AnnGroupBeingCreated]; ok {
		t.Errorf("being-created annotation left after success")
	}
	st := got.Status
	if st == nil || ptr.Deref(st.VolumeGroupSnapshotHandle, "") != "grp-groupsnapshot-9999-ffff" || !ptr.Deref(st.ReadyToUse, false) || st.CreationTime == nil {
		t.Fatalf("status = %+v", st)
	}
	if len(st.VolumeSnapshotInfoList) != 2 || st.VolumeSnapshotInfoList[1].SnapshotHandle != "s-vol-b" || st.VolumeSnapshotInfoList[1].VolumeHandle != "vol-b" ||
		st.VolumeSnapshotInfoList[0].RestoreSize == nil || *st.VolumeSnapshotInfoList[0].RestoreSize != 1<<20 {
		t.Errorf("member infos = %+v", st.VolumeSnapshotInfoList)
	}
	f.checkVerbs()
}

func TestGroupCreateError(t *testing.T) {
	f := newFixture(t, dynamic())
	f.grp.createFn = func(*csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "bad volumes")
	}
	if err := f.sync(); err == nil {
		t.Fatal("sync succeeded on a driver error")
	}
	got := f.get()
	if got.Status == nil || got.Status.Error == nil || !strings.Contains(ptr.Deref(got.Status.Error.Message, ""), "bad volumes") {
		t.Errorf("status = %+v, want the driver's error", got.Status)
	}
	if _, ok := got.Annotations[snapshotter.AnnGroupBeingCreated]; ok {
		t.Errorf("being-created kept after a final error")
	}
	select {
	case e := <-f.rec.Events:
		if !strings.Contains(e, "Warning "+reasonCreateFailed) {
			t.Errorf("event %q", e)
		}
	default:
		t.Errorf("no event")
	}
}

func TestGroupWaitsForFinalizer(t *testing.T) {
	c := dynamic()
	c.Finalizers = nil
	f := newFixture(t, c)
	if err := f.sync(); err != nil || len(f.grp.creates) != 0 {
		t.Errorf("err %v, creates %d: want no create before the finalizer", err, len(f.grp.creates))
	}
}

func released(policy snapv1.DeletionPolicy) *groupv1.VolumeGroupSnapshotContent {
	c := dynamic()
	c.Spec.DeletionPolicy = policy
	now := metav1.Now()
	c.DeletionTimestamp = &now
	c.Annotations[snapshotter.AnnGroupBeingDeleted] = "yes"
	c.Status = &groupv1.VolumeGroupSnapshotContentStatus{VolumeGroupSnapshotHandle: ptr.To("gh"), ReadyToUse: ptr.To(true),
		VolumeSnapshotInfoList: []groupv1.VolumeSnapshotInfo{{VolumeHandle: "vol-a", SnapshotHandle: "sa"}, {VolumeHandle: "vol-b", SnapshotHandle: "sb"}}}
	return c
}

func TestGroupDeletePolicy(t *testing.T) {
	f := newFixture(t, released(snapv1.VolumeSnapshotContentDelete))
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.deletes) != 1 || f.grp.deletes[0].GroupSnapshotId != "gh" || strings.Join(f.grp.deletes[0].SnapshotIds, ",") != "sa,sb" {
		t.Fatalf("deletes = %v, want gh with its members", f.grp.deletes)
	}
	if snapshotter.HasFinalizer(f.get(), snapshotter.FinalizerGroupContentBound) {
		t.Errorf("finalizer kept after delete")
	}
	f.checkVerbs()
}

func TestGroupRetainPolicy(t *testing.T) {
	f := newFixture(t, released(snapv1.VolumeSnapshotContentRetain))
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.deletes) != 0 {
		t.Errorf("DeleteVolumeGroupSnapshot called for Retain")
	}
	if snapshotter.HasFinalizer(f.get(), snapshotter.FinalizerGroupContentBound) {
		t.Errorf("finalizer kept on a released Retain content")
	}
}

func TestGroupPreProvisioned(t *testing.T) {
	c := &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: "g1"},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corev1.ObjectReference{Namespace: "default", Name: "grp"},
			DeletionPolicy:         snapv1.VolumeSnapshotContentRetain,
			Driver:                 driverName,
			Source: groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{
				VolumeGroupSnapshotHandle: "pre", VolumeSnapshotHandles: []string{"p1", "p2"}}},
		},
	}
	f := newFixture(t, c)
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.gets) != 1 || f.grp.gets[0].GroupSnapshotId != "pre" || len(f.grp.creates) != 0 {
		t.Fatalf("gets %v, creates %d", f.grp.gets, len(f.grp.creates))
	}
	st := f.get().Status
	if st == nil || ptr.Deref(st.VolumeGroupSnapshotHandle, "") != "pre" || !ptr.Deref(st.ReadyToUse, false) || len(st.VolumeSnapshotInfoList) != 2 {
		t.Errorf("status = %+v", st)
	}
}

// A group the driver reports not ready yet is asked again under the same name, and its
// status follows the driver's answer.
func TestGroupReadinessPolling(t *testing.T) {
	f := newFixture(t, dynamic())
	ready := false
	f.grp.createFn = func(req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
		var snaps []*csi.Snapshot
		for _, v := range req.SourceVolumeIds {
			snaps = append(snaps, &csi.Snapshot{SnapshotId: "s-" + v, SourceVolumeId: v, ReadyToUse: ready})
		}
		return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: &csi.VolumeGroupSnapshot{GroupSnapshotId: "gh", Snapshots: snaps, ReadyToUse: ready}}, nil
	}
	if err := f.sync(); err != errNotReady {
		t.Fatalf("sync of a not-ready group = %v, want errNotReady (requeue)", err)
	}
	got := f.get()
	if st := got.Status; st == nil || ptr.Deref(st.ReadyToUse, false) || ptr.Deref(st.VolumeGroupSnapshotHandle, "") != "gh" || len(st.VolumeSnapshotInfoList) != 2 {
		t.Fatalf("status = %+v, want handle gh with two members, not ready", st)
	}
	if _, ok := got.Annotations[snapshotter.AnnGroupBeingCreated]; ok {
		t.Error("being-created kept although the driver answered with the group's handle")
	}
	ready = true
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.creates) != 2 || f.grp.creates[1].Name != f.grp.creates[0].Name {
		t.Errorf("CreateVolumeGroupSnapshot not repeated under the same name: %d calls", len(f.grp.creates))
	}
	st := f.get().Status
	if !ptr.Deref(st.ReadyToUse, false) || len(st.VolumeSnapshotInfoList) != 2 || !ptr.Deref(st.VolumeSnapshotInfoList[0].ReadyToUse, false) {
		t.Errorf("status = %+v, want ready with ready members", st)
	}
	if err := f.sync(); err != nil || len(f.grp.creates) != 2 {
		t.Errorf("a ready group was asked again (err %v, %d calls)", err, len(f.grp.creates))
	}
	f.checkVerbs()
}

// A content deleted while its group is not being deleted (no being-deleted annotation) keeps
// its finalizer and its backend group snapshot.
func TestGroupDeletedWhileNotBeingDeletedKeepsFinalizer(t *testing.T) {
	c := released(snapv1.VolumeSnapshotContentDelete)
	delete(c.Annotations, snapshotter.AnnGroupBeingDeleted)
	f := newFixture(t, c)
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.deletes) != 0 || len(f.grp.creates) != 0 || !snapshotter.HasFinalizer(f.get(), snapshotter.FinalizerGroupContentBound) {
		t.Errorf("content released before its group was being deleted (deletes %d, creates %d)", len(f.grp.deletes), len(f.grp.creates))
	}
}

// A group deleted while its create is in flight (being-created, no handle yet): the create is
// repeated to learn the handle, and that group, members and all, is deleted before the
// finalizer goes.
func TestGroupDeleteWaitsForCreateInFlight(t *testing.T) {
	c := released(snapv1.VolumeSnapshotContentDelete)
	c.Status = nil
	c.Annotations[snapshotter.AnnGroupBeingCreated] = "yes"
	f := newFixture(t, c)
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.creates) != 1 {
		t.Fatalf("CreateVolumeGroupSnapshot calls = %d, want 1 to learn the handle of the in-flight create", len(f.grp.creates))
	}
	if len(f.grp.deletes) != 1 || f.grp.deletes[0].GroupSnapshotId != "grp-groupsnapshot-9999-ffff" || strings.Join(f.grp.deletes[0].SnapshotIds, ",") != "s-vol-a,s-vol-b" {
		t.Errorf("DeleteVolumeGroupSnapshot = %v, want the group and members CreateVolumeGroupSnapshot returned", f.grp.deletes)
	}
	if snapshotter.HasFinalizer(f.get(), snapshotter.FinalizerGroupContentBound) {
		t.Error("finalizer kept after the backend group was deleted")
	}
	f.checkVerbs()
}

// An uncertain CreateVolumeGroupSnapshot error (the call may still make the group) keeps
// being-created and records the error; a content being deleted meanwhile keeps its
// finalizer, so the group cannot leak.
func TestGroupUncertainErrorKeepsBeingCreated(t *testing.T) {
	for _, code := range []codes.Code{codes.DeadlineExceeded, codes.Unavailable} {
		t.Run(code.String(), func(t *testing.T) {
			f := newFixture(t, dynamic())
			f.grp.createFn = func(*csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
				return nil, status.Error(code, "backend slow")
			}
			if err := f.sync(); err == nil {
				t.Fatal("sync succeeded on a CreateVolumeGroupSnapshot error")
			}
			got := f.get()
			if got.Annotations[snapshotter.AnnGroupBeingCreated] != "yes" {
				t.Errorf("being-created dropped after an uncertain error: %v", got.Annotations)
			}
			if got.Status == nil || got.Status.Error == nil || !strings.Contains(ptr.Deref(got.Status.Error.Message, ""), "backend slow") || ptr.Deref(got.Status.ReadyToUse, false) {
				t.Errorf("status = %+v, want the driver's error, not ready", got.Status)
			}

			// The group is deleted while the outcome is unknown.
			now := metav1.Now()
			got.DeletionTimestamp = &now
			got.Annotations[snapshotter.AnnGroupBeingDeleted] = "yes"
			if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Update(f.ctx, got, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := f.sync(); err == nil {
				t.Error("sync succeeded while the create's outcome is unknown")
			}
			got = f.get()
			if !snapshotter.HasFinalizer(got, snapshotter.FinalizerGroupContentBound) || got.Annotations[snapshotter.AnnGroupBeingCreated] != "yes" || len(f.grp.deletes) != 0 {
				t.Errorf("content released with a create in doubt (finalizers %v, annotations %v, deletes %d)", got.Finalizers, got.Annotations, len(f.grp.deletes))
			}
			// The driver answers at last: the group it made is deleted, then the content goes.
			f.grp.createFn = nil
			if err := f.sync(); err != nil {
				t.Fatal(err)
			}
			if len(f.grp.deletes) != 1 || f.grp.deletes[0].GroupSnapshotId != "grp-groupsnapshot-9999-ffff" {
				t.Errorf("DeleteVolumeGroupSnapshot = %v, want the group the create made", f.grp.deletes)
			}
			if snapshotter.HasFinalizer(f.get(), snapshotter.FinalizerGroupContentBound) {
				t.Error("finalizer kept after the backend group was deleted")
			}
			f.checkVerbs()
		})
	}
}

func preProvisionedGroup() *groupv1.VolumeGroupSnapshotContent {
	return &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: "g1", Annotations: map[string]string{}},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corev1.ObjectReference{Namespace: "default", Name: "grp"},
			DeletionPolicy:         snapv1.VolumeSnapshotContentDelete,
			Driver:                 driverName,
			Source: groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{
				VolumeGroupSnapshotHandle: "pre", VolumeSnapshotHandles: []string{"p1", "p2"}}},
		},
	}
}

// getFails makes the fake's GetVolumeGroupSnapshot fail with err.
type getFails struct {
	*fakeGroup
	err error
}

func (g getFails) GetVolumeGroupSnapshot(_ context.Context, req *csi.GetVolumeGroupSnapshotRequest, _ ...grpc.CallOption) (*csi.GetVolumeGroupSnapshotResponse, error) {
	g.gets = append(g.gets, req)
	return nil, g.err
}

// A pre-provisioned group the driver cannot find: status.error and a warning event, not ready.
func TestGroupPreProvisionedNotFound(t *testing.T) {
	f := newFixture(t, preProvisionedGroup())
	f.c.cfg.CSI.Group = getFails{f.grp, status.Error(codes.NotFound, "no group pre")}
	if err := f.sync(); err == nil {
		t.Fatal("sync succeeded on a GetVolumeGroupSnapshot error")
	}
	st := f.get().Status
	if st == nil || st.Error == nil || !strings.Contains(ptr.Deref(st.Error.Message, ""), "no group pre") || ptr.Deref(st.ReadyToUse, false) {
		t.Errorf("status = %+v, want the driver's error, not ready", st)
	}
	select {
	case e := <-f.rec.Events:
		if !strings.Contains(e, "Warning "+reasonCheckFailed) {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event")
	}
	f.checkVerbs()
}

// A pre-provisioned content never bound to a group (no UID) is released when deleted: its
// Delete policy deletes the backend group with the handles of its spec.
func TestGroupPreProvisionedUnboundDeleted(t *testing.T) {
	c := preProvisionedGroup()
	c.Finalizers = []string{snapshotter.FinalizerGroupContentBound}
	now := metav1.Now()
	c.DeletionTimestamp = &now
	f := newFixture(t, c)
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if len(f.grp.deletes) != 1 || f.grp.deletes[0].GroupSnapshotId != "pre" || strings.Join(f.grp.deletes[0].SnapshotIds, ",") != "p1,p2" {
		t.Errorf("DeleteVolumeGroupSnapshot = %v, want pre with p1,p2", f.grp.deletes)
	}
	if snapshotter.HasFinalizer(f.get(), snapshotter.FinalizerGroupContentBound) {
		t.Error("finalizer kept")
	}
}

// Another driver's group content is left alone.
func TestGroupOtherDriverIgnored(t *testing.T) {
	c := dynamic()
	c.Spec.Driver = "other.example.com"
	f := newFixture(t, c)
	if err := f.sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(f.grp.creates) + len(f.grp.gets) + len(f.grp.deletes); n != 0 {
		t.Errorf("another driver's content was handled: %d CSI calls", n)
	}
	snaptest.CheckVerbs(t, f.snap.Actions(), "volumegroupsnapshotcontents") // reads only
}
