package csisnapshotter

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

const driverName = "fake.csi.kubevol.io"

// snapDriver adds the snapshot calls to csitest's driver, recording requests and answering
// with replaceable functions. beingCreated records, at each CreateSnapshot, whether the
// stored content carried the being-created annotation.
type snapDriver struct {
	*csitest.Driver

	mu           sync.Mutex
	creates      []*csi.CreateSnapshotRequest
	deletes      []*csi.DeleteSnapshotRequest
	lists        []*csi.ListSnapshotsRequest
	createFn     func(*csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error)
	listFn       func(*csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error)
	onCreate     func()
	beingCreated []bool
}

func (d *snapDriver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	d.mu.Lock()
	d.creates = append(d.creates, req)
	fn, hook := d.createFn, d.onCreate
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	if fn != nil {
		return fn(req)
	}
	return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: "snap-" + req.Name, SourceVolumeId: req.SourceVolumeId,
		SizeBytes: 1 << 20, ReadyToUse: true, CreationTime: timestamppb.New(time.Unix(1700000000, 0))}}, nil
}

func (d *snapDriver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletes = append(d.deletes, req)
	return &csi.DeleteSnapshotResponse{}, nil
}

func (d *snapDriver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	d.mu.Lock()
	d.lists = append(d.lists, req)
	fn := d.listFn
	d.mu.Unlock()
	if fn != nil {
		return fn(req)
	}
	return &csi.ListSnapshotsResponse{Entries: []*csi.ListSnapshotsResponse_Entry{{Snapshot: &csi.Snapshot{
		SnapshotId: req.SnapshotId, SizeBytes: 2 << 20, ReadyToUse: true, CreationTime: timestamppb.New(time.Unix(1600000000, 0))}}}}, nil
}

type fixture struct {
	t    *testing.T
	ctx  context.Context
	c    *Controller
	snap *snapfake.Clientset
	drv  *snapDriver
	rec  *record.FakeRecorder
}

func newFixture(t *testing.T, objs ...*snapv1.VolumeSnapshotContent) *fixture {
	t.Helper()
	return newFixtureCaps(t, []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS}, objs...)
}

// newFixtureCaps is newFixture with a driver that announces caps.
func newFixtureCaps(t *testing.T, caps []csi.ControllerServiceCapability_RPC_Type, objs ...*snapv1.VolumeSnapshotContent) *fixture {
	t.Helper()
	drv := &snapDriver{Driver: &csitest.Driver{Name: driverName, ControllerCaps: caps}}
	conn := snaptest.Dial(t, csitest.StartAs(t, drv.Driver, drv).Address)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ops"}, Data: map[string][]byte{"token": []byte("s3cr3t")}}
	class := &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "cls"}, Driver: driverName,
		DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Parameters: map[string]string{"tier": "gold"}}
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	snap := snapfake.NewSimpleClientset(class)
	for _, o := range objs {
		if _, err := snap.SnapshotV1().VolumeSnapshotContents().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := New(ctx, Config{ControllerConfig: sidecar.ControllerConfig{Client: fake.NewClientset(secret), CSI: conn, DriverName: driverName},
		Snap: snap, ExtraCreateMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	c.stopEvents()
	f := &fixture{t: t, ctx: ctx, c: c, snap: snap, drv: drv, rec: record.NewFakeRecorder(100)}
	c.recorder = f.rec
	snap.ClearActions()
	return f
}

// sync rebuilds the listers from the fake API and syncs the content once.
func (f *fixture) sync(name string) error {
	f.t.Helper()
	vsc, err := f.snap.SnapshotV1().VolumeSnapshotContents().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cl, err := f.snap.SnapshotV1().VolumeSnapshotClasses().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.c.contents = snaplisters.NewVolumeSnapshotContentLister(snaptest.Indexer(f.t, vsc.Items))
	f.c.classes = snaplisters.NewVolumeSnapshotClassLister(snaptest.Indexer(f.t, cl.Items))
	return f.c.sync(f.ctx, name)
}

func (f *fixture) get(name string) *snapv1.VolumeSnapshotContent {
	f.t.Helper()
	return snaptest.MustGet(f.t, f.ctx, f.snap.SnapshotV1().VolumeSnapshotContents(), name)
}

// checkVerbs fails on a write to volumesnapshotcontents other than update and patch (of the object and
// its status), the verbs upstream's RBAC grants the csi-snapshotter.
func (f *fixture) checkVerbs() {
	f.t.Helper()
	snaptest.CheckVerbs(f.t, f.snap.Actions(), "volumesnapshotcontents", "update", "patch")
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// dynamic is a content the snapshot-controller made for VolumeSnapshot default/snap1.
func dynamic(name string, policy snapv1.DeletionPolicy) *snapv1.VolumeSnapshotContent {
	return &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{snapshotter.FinalizerContentBound},
			Annotations: map[string]string{snapshotter.AnnDeletionSecretName: "creds", snapshotter.AnnDeletionSecretNamespace: "ops"}},
		Spec: snapv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef:       corev1.ObjectReference{Namespace: "default", Name: "snap1", UID: "1234-abcd"},
			DeletionPolicy:          policy,
			Driver:                  driverName,
			VolumeSnapshotClassName: ptr.To("cls"),
			Source:                  snapv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To("vol-1")},
		},
	}
}

func TestDynamicCreate(t *testing.T) {
	f := newFixture(t, dynamic("c1", snapv1.VolumeSnapshotContentDelete))
	f.drv.onCreate = func() {
		cur, err := f.snap.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), "c1", metav1.GetOptions{})
		f.drv.beingCreated = append(f.drv.beingCreated, err == nil && cur.Annotations[snapshotter.AnnBeingCreated] == "yes")
	}
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.creates) != 1 {
		t.Fatalf("CreateSnapshot calls = %d, want 1", len(f.drv.creates))
	}
	req := f.drv.creates[0]
	if req.Name != "snapshot-1234-abcd" || req.SourceVolumeId != "vol-1" {
		t.Errorf("CreateSnapshot name/source = %q/%q, want snapshot-1234-abcd/vol-1", req.Name, req.SourceVolumeId)
	}
	want := map[string]string{"tier": "gold", paramSnapshotName: "snap1", paramSnapshotNamespace: "default", paramContentName: "c1"}
	for k, v := range want {
		if req.Parameters[k] != v {
			t.Errorf("parameter %s = %q, want %q", k, req.Parameters[k], v)
		}
	}
	if req.Secrets["token"] != "s3cr3t" {
		t.Errorf("CreateSnapshot secrets = %v, want the deletion secret's data", req.Secrets)
	}
	if len(f.drv.beingCreated) != 1 || !f.drv.beingCreated[0] {
		t.Errorf("being-created annotation not stored before CreateSnapshot")
	}
	got := f.get("c1")
	if _, ok := got.Annotations[snapshotter.AnnBeingCreated]; ok {
		t.Errorf("being-created annotation left after a successful CreateSnapshot")
	}
	st := got.Status
	if st == nil || ptr.Deref(st.SnapshotHandle, "") != "snap-snapshot-1234-abcd" || !ptr.Deref(st.ReadyToUse, false) ||
		st.CreationTime == nil || *st.CreationTime != time.Unix(1700000000, 0).UnixNano() || st.RestoreSize == nil || *st.RestoreSize != 1<<20 || st.Error != nil {
		t.Errorf("status = %+v, want handle, ready, creation time and restore size from the driver", st)
	}
	if !snapshotter.HasFinalizer(got, snapshotter.FinalizerContentBound) {
		t.Errorf("bound finalizer removed from a live content")
	}
	// Ready: a second sync asks nothing more of the driver.
	if err := f.sync("c1"); err != nil || len(f.drv.creates) != 1 {
		t.Errorf("second sync: err %v, CreateSnapshot calls %d, want nil and 1", err, len(f.drv.creates))
	}
	f.checkVerbs()
}

func TestWaitsForFinalizer(t *testing.T) {
	c := dynamic("c1", snapv1.VolumeSnapshotContentDelete)
	c.Finalizers = nil
	f := newFixture(t, c)
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.creates) != 0 {
		t.Errorf("CreateSnapshot called for a content without the bound finalizer")
	}
}

func TestReadinessPolling(t *testing.T) {
	f := newFixture(t, dynamic("c1", snapv1.VolumeSnapshotContentDelete))
	ready := false
	f.drv.createFn = func(req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
		return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: "h1", SourceVolumeId: req.SourceVolumeId, ReadyToUse: ready}}, nil
	}
	if err := f.sync("c1"); err != errNotReady {
		t.Fatalf("sync of a not-ready snapshot = %v, want errNotReady (requeue)", err)
	}
	if st := f.get("c1").Status; st == nil || ptr.Deref(st.ReadyToUse, false) || ptr.Deref(st.SnapshotHandle, "") != "h1" {
		t.Fatalf("status = %+v, want handle h1, not ready", st)
	}
	ready = true
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.creates) != 2 || f.drv.creates[1].Name != f.drv.creates[0].Name {
		t.Errorf("CreateSnapshot not repeated under the same name: %d calls", len(f.drv.creates))
	}
	if st := f.get("c1").Status; !ptr.Deref(st.ReadyToUse, false) {
		t.Errorf("content not ready after the driver reported ready")
	}
}

func TestCreateError(t *testing.T) {
	for _, tc := range []struct {
		name         string
		code         codes.Code
		keepsBeingCr bool
	}{
		{"final", codes.InvalidArgument, false},
		{"in progress", codes.DeadlineExceeded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, dynamic("c1", snapv1.VolumeSnapshotContentDelete))
			f.drv.createFn = func(*csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
				return nil, status.Error(tc.code, "backend says no")
			}
			if err := f.sync("c1"); err == nil {
				t.Fatal("sync succeeded on a CreateSnapshot error")
			}
			got := f.get("c1")
			if got.Status == nil || got.Status.Error == nil || !strings.Contains(ptr.Deref(got.Status.Error.Message, ""), "backend says no") || ptr.Deref(got.Status.ReadyToUse, false) {
				t.Errorf("status = %+v, want status.error with the driver's message, not ready", got.Status)
			}
			if _, ok := got.Annotations[snapshotter.AnnBeingCreated]; ok != tc.keepsBeingCr {
				t.Errorf("being-created annotation present = %v, want %v", ok, tc.keepsBeingCr)
			}
			ev := f.events()
			if len(ev) != 1 || !strings.Contains(ev[0], "Warning "+reasonCreateFailed) {
				t.Errorf("events = %q, want one %s warning", ev, reasonCreateFailed)
			}
			f.checkVerbs()
		})
	}
}

func TestMissingClassError(t *testing.T) {
	c := dynamic("c1", snapv1.VolumeSnapshotContentDelete)
	c.Spec.VolumeSnapshotClassName = ptr.To("nope")
	f := newFixture(t, c)
	if err := f.sync("c1"); err == nil {
		t.Fatal("sync succeeded without the class")
	}
	if len(f.drv.creates) != 0 {
		t.Errorf("CreateSnapshot called without a class")
	}
	if st := f.get("c1").Status; st == nil || st.Error == nil || !strings.Contains(ptr.Deref(st.Error.Message, ""), "nope") {
		t.Errorf("status = %+v, want an error naming the class", st)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], reasonCreateFailed) {
		t.Errorf("events = %q", ev)
	}
}

// deleted is a ready content whose VolumeSnapshot is being deleted (the snapshot-controller
// set being-deleted) and which was deleted itself.
func deleted(policy snapv1.DeletionPolicy) *snapv1.VolumeSnapshotContent {
	c := dynamic("c1", policy)
	now := metav1.Now()
	c.DeletionTimestamp = &now
	c.Annotations[snapshotter.AnnBeingDeleted] = "yes"
	c.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("h1"), ReadyToUse: ptr.To(true)}
	return c
}

func TestDeletePolicyDeletes(t *testing.T) {
	f := newFixture(t, deleted(snapv1.VolumeSnapshotContentDelete))
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.deletes) != 1 || f.drv.deletes[0].SnapshotId != "h1" || f.drv.deletes[0].Secrets["token"] != "s3cr3t" {
		t.Fatalf("DeleteSnapshot requests = %v, want one of h1 with the secret", f.drv.deletes)
	}
	if snapshotter.HasFinalizer(f.get("c1"), snapshotter.FinalizerContentBound) {
		t.Errorf("bound finalizer kept after DeleteSnapshot")
	}
	if len(f.drv.creates) != 0 {
		t.Errorf("CreateSnapshot called for a ready content being deleted")
	}
	f.checkVerbs()
}

func TestRetainPolicyKeeps(t *testing.T) {
	f := newFixture(t, deleted(snapv1.VolumeSnapshotContentRetain))
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.deletes) != 0 {
		t.Errorf("DeleteSnapshot called for a Retain content")
	}
	if snapshotter.HasFinalizer(f.get("c1"), snapshotter.FinalizerContentBound) {
		t.Errorf("bound finalizer kept on a released Retain content")
	}
}

func TestDeletedWhileNotBeingDeletedKeepsFinalizer(t *testing.T) {
	c := deleted(snapv1.VolumeSnapshotContentDelete)
	delete(c.Annotations, snapshotter.AnnBeingDeleted)
	f := newFixture(t, c)
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.deletes) != 0 || !snapshotter.HasFinalizer(f.get("c1"), snapshotter.FinalizerContentBound) {
		t.Errorf("content released before its VolumeSnapshot was being deleted (deletes %d)", len(f.drv.deletes))
	}
}

func TestDeleteWaitsForCreateInFlight(t *testing.T) {
	c := deleted(snapv1.VolumeSnapshotContentDelete)
	c.Status = nil
	c.Annotations[snapshotter.AnnBeingCreated] = "yes"
	f := newFixture(t, c)
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.creates) != 1 {
		t.Fatalf("CreateSnapshot calls = %d, want 1 to learn the handle of the in-flight create", len(f.drv.creates))
	}
	if len(f.drv.deletes) != 1 || f.drv.deletes[0].SnapshotId != "snap-snapshot-1234-abcd" {
		t.Errorf("DeleteSnapshot = %v, want the handle CreateSnapshot returned", f.drv.deletes)
	}
}

func preProvisioned(name string) *snapv1.VolumeSnapshotContent {
	return &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: snapv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: "default", Name: "snap1"},
			DeletionPolicy:    snapv1.VolumeSnapshotContentRetain,
			Driver:            driverName,
			Source:            snapv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("existing-1")},
		},
	}
}

func TestPreProvisionedStatus(t *testing.T) {
	f := newFixture(t, preProvisioned("c1"))
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.lists) != 1 || f.drv.lists[0].SnapshotId != "existing-1" {
		t.Fatalf("ListSnapshots = %v, want one for existing-1", f.drv.lists)
	}
	st := f.get("c1").Status
	if st == nil || ptr.Deref(st.SnapshotHandle, "") != "existing-1" || !ptr.Deref(st.ReadyToUse, false) ||
		st.RestoreSize == nil || *st.RestoreSize != 2<<20 || st.CreationTime == nil || *st.CreationTime != time.Unix(1600000000, 0).UnixNano() {
		t.Errorf("status = %+v, want the driver's snapshot", st)
	}
	if len(f.drv.creates) != 0 {
		t.Errorf("CreateSnapshot called for a pre-provisioned content")
	}
	f.checkVerbs()
}

func TestPreProvisionedNotFound(t *testing.T) {
	f := newFixture(t, preProvisioned("c1"))
	f.drv.listFn = func(*csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
		return &csi.ListSnapshotsResponse{}, nil
	}
	if err := f.sync("c1"); err == nil {
		t.Fatal("sync succeeded for a snapshot the driver does not have")
	}
	st := f.get("c1").Status
	if st == nil || st.Error == nil || !strings.Contains(ptr.Deref(st.Error.Message, ""), "existing-1") || ptr.Deref(st.ReadyToUse, false) {
		t.Errorf("status = %+v, want an error naming the handle", st)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], reasonCheckFailed) {
		t.Errorf("events = %q, want one %s", ev, reasonCheckFailed)
	}
}

func TestPreProvisionedUnboundDeleted(t *testing.T) {
	c := preProvisioned("c1")
	c.Spec.DeletionPolicy = snapv1.VolumeSnapshotContentDelete
	c.Finalizers = []string{snapshotter.FinalizerContentBound}
	now := metav1.Now()
	c.DeletionTimestamp = &now
	f := newFixture(t, c)
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.deletes) != 1 || f.drv.deletes[0].SnapshotId != "existing-1" {
		t.Errorf("DeleteSnapshot = %v, want existing-1", f.drv.deletes)
	}
	if snapshotter.HasFinalizer(f.get("c1"), snapshotter.FinalizerContentBound) {
		t.Errorf("finalizer kept")
	}
}

func TestOtherDriverIgnored(t *testing.T) {
	c := dynamic("c1", snapv1.VolumeSnapshotContentDelete)
	c.Spec.Driver = "other.csi.io"
	f := newFixture(t, c)
	if err := f.sync("c1"); err != nil {
		t.Fatal(err)
	}
	if len(f.drv.creates) != 0 {
		t.Errorf("CreateSnapshot called for another driver's content")
	}
	for _, a := range f.snap.Actions() {
		if _, ok := a.(clienttesting.PatchAction); ok {
			t.Errorf("wrote to another driver's content: %v", a)
		}
	}
}
