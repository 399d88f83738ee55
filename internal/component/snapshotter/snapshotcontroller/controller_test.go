package snapshotcontroller

import (
	"context"
	"testing"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

const (
	ns     = "ns"
	driver = "d.example.com"
)

type fixture struct {
	t    *testing.T
	ctx  context.Context
	core *fake.Clientset
	snap *snapfake.Clientset
	c    *Controller
	reg  *prometheus.Registry // the operation metrics
}

func start(t *testing.T, core []runtime.Object, snaps ...runtime.Object) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, reg: prometheus.NewRegistry()}
	f.core, f.snap = snaptest.Clients(core, snaps...)
	c, err := New(ctx, Config{RoleConfig: RoleConfig{Client: f.core, Snap: f.snap, PreventVolumeModeConversion: true,
		Metrics: opmetrics.New(f.reg)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stopEvents)
	f.c = c
	return f
}

// syncUntil rebuilds the listers from the fake API and syncs ns/name until cond holds.
func (f *fixture) syncUntil(name, what string, cond func() bool) {
	f.t.Helper()
	for range 20 {
		if cond() {
			return
		}
		f.steps(name, 1)
	}
	if !cond() {
		f.t.Fatalf("never %s", what)
	}
}

// steps rebuilds the listers from the fake API and syncs ns/name, n times.
func (f *fixture) steps(name string, n int) {
	for range n {
		all := metav1.ListOptions{}
		vs, _ := f.snap.SnapshotV1().VolumeSnapshots("").List(f.ctx, all)
		vsc, _ := f.snap.SnapshotV1().VolumeSnapshotContents().List(f.ctx, all)
		cl, _ := f.snap.SnapshotV1().VolumeSnapshotClasses().List(f.ctx, all)
		pvc, _ := f.core.CoreV1().PersistentVolumeClaims("").List(f.ctx, all)
		pv, _ := f.core.CoreV1().PersistentVolumes().List(f.ctx, all)
		f.c.snapshots = snaplisters.NewVolumeSnapshotLister(snaptest.Indexer(f.t, vs.Items))
		f.c.contents = snaplisters.NewVolumeSnapshotContentLister(snaptest.Indexer(f.t, vsc.Items))
		f.c.classes = snaplisters.NewVolumeSnapshotClassLister(snaptest.Indexer(f.t, cl.Items))
		f.c.claims = corelisters.NewPersistentVolumeClaimLister(snaptest.Indexer(f.t, pvc.Items))
		f.c.volumes = corelisters.NewPersistentVolumeLister(snaptest.Indexer(f.t, pv.Items))
		_ = f.c.sync(f.ctx, ns+"/"+name)
	}
}

func (f *fixture) vs(name string) *snapv1.VolumeSnapshot {
	return snaptest.Find(f.ctx, f.snap.SnapshotV1().VolumeSnapshots(ns), name)
}

func (f *fixture) vsc(name string) *snapv1.VolumeSnapshotContent {
	return snaptest.Find(f.ctx, f.snap.SnapshotV1().VolumeSnapshotContents(), name)
}

func source() []runtime.Object {
	pvc, pv := snaptest.BoundClaim(ns, "src", driver, nil)
	return []runtime.Object{pvc, pv}
}

func class(name string, policy snapv1.DeletionPolicy, isDefault bool) *snapv1.VolumeSnapshotClass {
	c := &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver, DeletionPolicy: policy}
	if isDefault {
		c.Annotations = map[string]string{snapshotter.AnnDefaultClass: "true"}
	}
	return c
}

func dynamic(name string) *snapv1.VolumeSnapshot {
	claim := "src"
	return &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}}}
}

// A dynamic snapshot: the default class, the claim's protection, a content born with its
// finalizer and upstream's fields; when the sidecar reports the snapshot, the status is
// copied with the bound finalizer, and the claim is released once the snapshot is ready.
func TestDynamicSnapshot(t *testing.T) {
	f := start(t, source(), class("gold", snapv1.VolumeSnapshotContentDelete, true), dynamic("s"))
	f.syncUntil("s", "created the content", func() bool { return f.vsc("snapcontent-uid-s") != nil })
	c := f.vsc("snapcontent-uid-s")
	switch {
	case ptr.Deref(f.vs("s").Spec.VolumeSnapshotClassName, "") != "gold":
		t.Errorf("default class not set")
	case !snapshotter.HasFinalizer(c, snapshotter.FinalizerContentBound) || c.Spec.VolumeSnapshotRef.UID != "uid-s":
		t.Errorf("content %+v", c.ObjectMeta)
	case ptr.Deref(c.Spec.Source.VolumeHandle, "") != "vol-src" || c.Spec.SourceVolumeMode == nil || c.Spec.DeletionPolicy != snapv1.VolumeSnapshotContentDelete:
		t.Errorf("content spec %+v", c.Spec)
	}
	pvc, _ := f.core.CoreV1().PersistentVolumeClaims(ns).Get(f.ctx, "src", metav1.GetOptions{})
	if !snapshotter.HasFinalizer(pvc, snapshotter.FinalizerPVCAsSource) {
		t.Errorf("claim not protected: %v", pvc.Finalizers)
	}
	ready, created, size, handle := true, int64(1e18), int64(4096), "h1"
	c.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle, ReadyToUse: &ready, CreationTime: &created, RestoreSize: &size}
	if _, err := f.snap.SnapshotV1().VolumeSnapshotContents().UpdateStatus(f.ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.syncUntil("s", "turned ready", func() bool { vs := f.vs("s"); return vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false) })
	vs := f.vs("s")
	switch {
	case ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "") != c.Name || vs.Status.RestoreSize == nil || vs.Status.RestoreSize.Value() != size:
		t.Errorf("status %+v", vs.Status)
	case !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotBound) || !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotAsSource):
		t.Errorf("finalizers %v", vs.Finalizers)
	}
	snaptest.CheckOperations(t, f.reg, map[string]int{"CreateSnapshot success dynamic " + driver: 1, "CreateSnapshotAndReady success dynamic " + driver: 1})
	f.syncUntil("s", "released the claim", func() bool {
		pvc, _ := f.core.CoreV1().PersistentVolumeClaims(ns).Get(f.ctx, "src", metav1.GetOptions{})
		return !snapshotter.HasFinalizer(pvc, snapshotter.FinalizerPVCAsSource)
	})
}

// No default class for the claim's driver is reported in the snapshot's status, and no
// content is created (TestContentStatusCopied has the sidecar's error).
func TestErrorStatus(t *testing.T) {
	f := start(t, source(), dynamic("s"))
	f.syncUntil("s", "reported the missing default class", func() bool {
		vs := f.vs("s")
		return vs.Status != nil && vs.Status.Error != nil && !ptr.Deref(vs.Status.ReadyToUse, false)
	})
	if f.vsc("snapcontent-uid-s") != nil {
		t.Error("content created without a class")
	}
}

// A pre-provisioned content is bound (UID, class), finalized, and a content bound to another
// snapshot is refused.
func TestPreProvisioned(t *testing.T) {
	handle, name, other := "h", "static", "taken"
	content := func(n, ref string) *snapv1.VolumeSnapshotContent {
		return &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: ref, Namespace: ns}, Driver: driver,
				DeletionPolicy: snapv1.VolumeSnapshotContentRetain, Source: snapv1.VolumeSnapshotContentSource{SnapshotHandle: &handle}}}
	}
	cls := "gold"
	vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns, UID: "uid-s"},
		Spec: snapv1.VolumeSnapshotSpec{VolumeSnapshotClassName: &cls, Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &name}}}
	wrong := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, UID: "uid-w"},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &other}}}
	f := start(t, nil, content(name, "s"), content(other, "someone-else"), vs, wrong)
	f.syncUntil("s", "bound the content", func() bool {
		c := f.vsc(name)
		return c.Spec.VolumeSnapshotRef.UID == "uid-s" && ptr.Deref(c.Spec.VolumeSnapshotClassName, "") == "gold" && snapshotter.HasFinalizer(c, snapshotter.FinalizerContentBound)
	})
	if vs := f.vs("s"); snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotBound) {
		t.Error("a snapshot of a Retain content got the bound finalizer")
	}
	f.syncUntil("w", "refused the misbound content", func() bool {
		vs := f.vs("w")
		return vs.Status != nil && vs.Status.Error != nil
	})
	if f.vsc(other).Spec.VolumeSnapshotRef.UID != "" {
		t.Error("a content bound to another snapshot was taken")
	}
}

// Deleting a snapshot: the content is marked being-deleted; a Delete content is deleted and
// the snapshot keeps its bound finalizer until the content is gone; a Retain content is kept
// and the snapshot released.
func TestDeleteSnapshot(t *testing.T) {
	for _, policy := range []snapv1.DeletionPolicy{snapv1.VolumeSnapshotContentDelete, snapv1.VolumeSnapshotContentRetain} {
		t.Run(string(policy), func(t *testing.T) {
			now := metav1.Now()
			vs := dynamic("s")
			cname := "snapcontent-uid-s"
			vs.DeletionTimestamp = &now
			vs.Finalizers = []string{snapshotter.FinalizerSnapshotAsSource, snapshotter.FinalizerSnapshotBound}
			vs.Status = &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &cname}
			handle := "vol-src"
			content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: cname, Finalizers: []string{snapshotter.FinalizerContentBound}},
				Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: "s", Namespace: ns, UID: "uid-s"}, Driver: driver,
					DeletionPolicy: policy, Source: snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle}}}
			f := start(t, source(), vs, content)
			if policy == snapv1.VolumeSnapshotContentDelete {
				// The fake API server deletes at once, as if the sidecar had finished.
				f.syncUntil("s", "deleted the content", func() bool { return f.vsc(cname) == nil })
			} else {
				f.syncUntil("s", "marked the content", func() bool { return f.vsc(cname).Annotations[snapshotter.AnnBeingDeleted] == "yes" })
			}
			f.syncUntil("s", "released the snapshot", func() bool { vs := f.vs("s"); return vs == nil || len(vs.Finalizers) == 0 })
			if policy == snapv1.VolumeSnapshotContentRetain && f.vsc(cname) == nil {
				t.Error("a Retain content was deleted")
			}
			// Recorded once the last finalizer goes, whichever the policy; the snapshot was
			// never taken. A gone content leaves the driver unknown (no class named).
			owner := driver
			if policy == snapv1.VolumeSnapshotContentDelete {
				owner = "unknown"
			}
			snaptest.CheckOperations(t, f.reg, map[string]int{"DeleteSnapshot success dynamic " + owner: 1,
				"CreateSnapshot cancel dynamic " + owner: 1, "CreateSnapshotAndReady cancel dynamic " + owner: 1})
		})
	}
}

// A member of a group snapshot: never a content of its own before the group binds it, and
// not deletable while its group exists.
func TestGroupMember(t *testing.T) {
	member := dynamic("m")
	member.OwnerReferences = []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: "g", UID: "uid-g"}}
	group := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns, UID: "uid-g"}}
	f := start(t, source(), class("gold", snapv1.VolumeSnapshotContentDelete, true), member, group)
	f.syncUntil("m", "protected the member", func() bool { return snapshotter.HasFinalizer(f.vs("m"), snapshotter.FinalizerSnapshotAsSource) })
	f.steps("m", 3)
	if f.vsc("snapcontent-uid-m") != nil {
		t.Fatal("a member snapshot got a content of its own")
	}
	now := metav1.Now()
	m := f.vs("m")
	m.DeletionTimestamp = &now
	m.Finalizers = append(m.Finalizers, snapshotter.FinalizerSnapshotInGroup)
	if _, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Update(f.ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.steps("m", 3)
	if !snapshotter.HasFinalizer(f.vs("m"), snapshotter.FinalizerSnapshotInGroup) {
		t.Fatal("a member was released while its group exists")
	}
	if err := f.snap.GroupsnapshotV1().VolumeGroupSnapshots(ns).Delete(f.ctx, "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.syncUntil("m", "released the member of a deleted group", func() bool {
		vs := f.vs("m")
		return vs == nil || !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotInGroup)
	})
}

// events replaces the controller's recorder with one the test reads.
func (f *fixture) events() *record.FakeRecorder {
	rec := record.NewFakeRecorder(100)
	f.c.recorder = rec
	return rec
}

// setContentStatus writes st as the content's status, as the sidecar does.
func (f *fixture) setContentStatus(name string, st *snapv1.VolumeSnapshotContentStatus) {
	f.t.Helper()
	c := f.vsc(name)
	c.Status = st
	if _, err := f.snap.SnapshotV1().VolumeSnapshotContents().UpdateStatus(f.ctx, c, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) claimProtected() bool {
	pvc, _ := f.core.CoreV1().PersistentVolumeClaims(ns).Get(f.ctx, "src", metav1.GetOptions{})
	return snapshotter.HasFinalizer(pvc, snapshotter.FinalizerPVCAsSource)
}

// The sidecar's status.error on the content reaches the snapshot's status.error, with the
// snapshot not ready and its claim still protected; once the content turns ready
// (not-ready → ready), the snapshot is ready, the error is gone and the claim released.
func TestContentStatusCopied(t *testing.T) {
	f := start(t, source(), class("gold", snapv1.VolumeSnapshotContentDelete, true), dynamic("s"))
	f.syncUntil("s", "created the content", func() bool { return f.vsc("snapcontent-uid-s") != nil })
	msg, when := "Failed to check and update snapshot content: backend busy", metav1.Now()
	f.setContentStatus("snapcontent-uid-s", &snapv1.VolumeSnapshotContentStatus{Error: &snapv1.VolumeSnapshotError{Message: &msg, Time: &when}})
	f.syncUntil("s", "copied the content's error", func() bool {
		vs := f.vs("s")
		return vs.Status != nil && vs.Status.Error != nil && ptr.Deref(vs.Status.Error.Message, "") == msg
	})
	vs := f.vs("s")
	if ptr.Deref(vs.Status.ReadyToUse, false) || vs.Status.CreationTime != nil || ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "") != "snapcontent-uid-s" {
		t.Errorf("status with the sidecar's error: %+v", vs.Status)
	}
	if !f.claimProtected() {
		t.Error("claim released while its snapshot failed")
	}

	// Taken but not ready yet (a driver that uploads): creationTime, not ready, no error.
	notReady, ready, created, size, handle := false, true, int64(1e18), int64(4096), "h1"
	f.setContentStatus("snapcontent-uid-s", &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle, ReadyToUse: &notReady, CreationTime: &created, RestoreSize: &size})
	f.syncUntil("s", "copied the taken, not ready status", func() bool { vs := f.vs("s"); return vs.Status.CreationTime != nil && vs.Status.Error == nil })
	if vs := f.vs("s"); ptr.Deref(vs.Status.ReadyToUse, false) || vs.Status.RestoreSize == nil || vs.Status.RestoreSize.Value() != size {
		t.Errorf("status of a taken snapshot not ready yet: %+v", vs.Status)
	}
	f.steps("s", 2)
	if !f.claimProtected() {
		t.Error("claim released before its snapshot is ready")
	}
	snaptest.CheckOperations(t, f.reg, map[string]int{"CreateSnapshot success dynamic " + driver: 1})

	f.setContentStatus("snapcontent-uid-s", &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle, ReadyToUse: &ready, CreationTime: &created, RestoreSize: &size})
	f.syncUntil("s", "turned ready", func() bool { vs := f.vs("s"); return ptr.Deref(vs.Status.ReadyToUse, false) })
	if vs := f.vs("s"); vs.Status.Error != nil {
		t.Errorf("a ready snapshot kept the error %q", ptr.Deref(vs.Status.Error.Message, ""))
	}
	f.syncUntil("s", "released the claim", func() bool { return !f.claimProtected() })
	snaptest.CheckOperations(t, f.reg, map[string]int{"CreateSnapshot success dynamic " + driver: 1, "CreateSnapshotAndReady success dynamic " + driver: 1})
}

// boundPair returns a ready dynamic snapshot s bound to its Delete-policy content, both
// with the finalizers this controller gives them.
func boundPair() (*snapv1.VolumeSnapshot, *snapv1.VolumeSnapshotContent) {
	vs := dynamic("s")
	cname, cls, handle, snapHandle := "snapcontent-uid-s", "gold", "vol-src", "h1"
	ready, created := true, int64(1e18)
	vs.Spec.VolumeSnapshotClassName = &cls
	vs.Finalizers = []string{snapshotter.FinalizerSnapshotAsSource, snapshotter.FinalizerSnapshotBound}
	t := metav1.Unix(0, created)
	vs.Status = &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &cname, ReadyToUse: &ready, CreationTime: &t}
	content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: cname, Finalizers: []string{snapshotter.FinalizerContentBound}},
		Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: "s", Namespace: ns, UID: "uid-s"}, Driver: driver,
			VolumeSnapshotClassName: &cls, DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Source: snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle}},
		Status: &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &snapHandle, ReadyToUse: &ready, CreationTime: &created}}
	return vs, content
}

// A bound content deleted before its snapshot: the controller neither adds nor takes away
// the content's bound finalizer, the snapshot stays ready and unchanged, and the content is
// not marked being-deleted (the sidecar keeps the backend snapshot). Deleting the snapshot
// afterwards marks it and waits for the content to go, without a second delete.
func TestContentDeletedFirst(t *testing.T) {
	vs, content := boundPair()
	now := metav1.Now()
	content.DeletionTimestamp = &now
	f := start(t, source(), class("gold", snapv1.VolumeSnapshotContentDelete, true), vs, content)
	f.steps("s", 3)
	got, c := f.vs("s"), f.vsc(content.Name)
	switch {
	case c == nil || !snapshotter.HasFinalizer(c, snapshotter.FinalizerContentBound):
		t.Fatalf("content lost its bound finalizer: %+v", c)
	case c.Annotations[snapshotter.AnnBeingDeleted] == "yes":
		t.Error("content marked being-deleted while its snapshot lives")
	case got.DeletionTimestamp != nil || !ptr.Deref(got.Status.ReadyToUse, false) || got.Status.Error != nil:
		t.Errorf("snapshot changed by its content's deletion: %+v %+v", got.ObjectMeta, got.Status)
	case !snapshotter.HasFinalizer(got, snapshotter.FinalizerSnapshotBound):
		t.Errorf("snapshot lost its bound finalizer: %v", got.Finalizers)
	}
	for _, a := range f.snap.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("%s %s while only the content is being deleted", a.GetVerb(), a.GetResource().Resource)
		}
	}

	got.DeletionTimestamp = &now
	if _, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Update(f.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.syncUntil("s", "marked the content being-deleted", func() bool { return f.vsc(content.Name).Annotations[snapshotter.AnnBeingDeleted] == "yes" })
	f.steps("s", 2)
	if vs := f.vs("s"); !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotBound) {
		t.Errorf("snapshot released while its Delete-policy content exists: %v", vs.Finalizers)
	}
	for _, a := range f.snap.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("delete %s of a content already being deleted", a.GetResource().Resource)
		}
	}
	// The sidecar deletes the backend snapshot and lets the content go.
	if err := f.snap.SnapshotV1().VolumeSnapshotContents().Delete(f.ctx, content.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.syncUntil("s", "released the snapshot", func() bool { vs := f.vs("s"); return vs == nil || len(vs.Finalizers) == 0 })
}

// A snapshot deleted while a claim restores from it (Pending, dataSource naming it) keeps its
// finalizers and content, with a SnapshotDeletePending event; once the claim is bound, the
// deletion goes on.
func TestDeleteWaitsForRestore(t *testing.T) {
	vs, content := boundPair()
	now := metav1.Now()
	vs.DeletionTimestamp = &now
	restoring := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "restored", Namespace: ns},
		Spec:   corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{APIGroup: &snapv1.SchemeGroupVersion.Group, Kind: "VolumeSnapshot", Name: "s"}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	f := start(t, append(source(), restoring), class("gold", snapv1.VolumeSnapshotContentDelete, true), vs, content)
	rec := f.events()
	f.steps("s", 3)
	if !snaptest.SawEvent(rec, "SnapshotDeletePending Snapshot is being used to restore claim restored") {
		t.Error("no SnapshotDeletePending event naming the restoring claim")
	}
	got, c := f.vs("s"), f.vsc(content.Name)
	switch {
	case !snapshotter.HasFinalizer(got, snapshotter.FinalizerSnapshotBound) || !snapshotter.HasFinalizer(got, snapshotter.FinalizerSnapshotAsSource):
		t.Errorf("finalizers removed while a claim restores: %v", got.Finalizers)
	case c == nil || c.DeletionTimestamp != nil || c.Annotations[snapshotter.AnnBeingDeleted] == "yes":
		t.Errorf("content touched while a claim restores: %+v", c)
	}
	restoring.Status.Phase = corev1.ClaimBound
	if _, err := f.core.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(f.ctx, restoring, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.syncUntil("s", "deleted the content", func() bool { return f.vsc(content.Name) == nil })
	f.syncUntil("s", "released the snapshot", func() bool { vs := f.vs("s"); return vs == nil || len(vs.Finalizers) == 0 })
}

// A pre-provisioned snapshot naming a dynamic content (volumeHandle, no snapshotHandle) is
// refused with SnapshotContentMismatch, and a spec naming both or neither source with
// SnapshotValidationError; no content is touched.
func TestInvalidSources(t *testing.T) {
	handle, cname, claim := "vol-src", "dyn", "src"
	dyn := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: cname},
		Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: "pre", Namespace: ns}, Driver: driver,
			DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Source: snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle}}}
	pre := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "pre", Namespace: ns, UID: "uid-pre"},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &cname}}}
	both := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "both", Namespace: ns, UID: "uid-both"},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &cname, PersistentVolumeClaimName: &claim}}}
	neither := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "neither", Namespace: ns, UID: "uid-neither"}}
	f := start(t, source(), class("gold", snapv1.VolumeSnapshotContentDelete, true), dyn, pre, both, neither)
	rec := f.events()
	for name, reason := range map[string]string{"pre": "SnapshotContentMismatch", "both": "SnapshotValidationError", "neither": "SnapshotValidationError"} {
		f.syncUntil(name, "reported the invalid source of "+name, func() bool {
			vs := f.vs(name)
			return vs.Status != nil && vs.Status.Error != nil && !ptr.Deref(vs.Status.ReadyToUse, false)
		})
		if !snaptest.SawEvent(rec, "Warning "+reason) {
			t.Errorf("%s: no %s event", name, reason)
		}
	}
	c := f.vsc(cname)
	if c.Spec.VolumeSnapshotRef.UID != "" || len(c.Finalizers) != 0 {
		t.Errorf("a dynamic content was bound to a pre-provisioned snapshot: %+v", c)
	}
	if f.vsc("snapcontent-uid-both") != nil || f.claimProtected() {
		t.Error("a snapshot with two sources took a snapshot of the claim")
	}
}
