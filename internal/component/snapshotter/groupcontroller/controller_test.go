package groupcontroller

import (
	"context"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	grouplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumegroupsnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snapshotcontroller"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

const (
	ns     = "ns"
	driver = "d.example.com"
)

// boundClaim returns a claim labelled app=db bound to a CSI PV of driver.
func boundClaim(name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	return snaptest.BoundClaim(ns, name, driver, map[string]string{"app": "db"})
}

type fixture struct {
	t    *testing.T
	ctx  context.Context
	core *fake.Clientset
	snap *snapfake.Clientset
	c    *Controller
	reg  *prometheus.Registry // the operation metrics
}

// start builds the controller over fake clientsets holding objs. The informers do not run:
// before every sync the listers are rebuilt from what the fake API holds, so each sync sees
// the writes of the one before, as upstream's unit tests drive their controllers.
func start(t *testing.T, core []runtime.Object, snaps ...runtime.Object) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, reg: prometheus.NewRegistry()}
	f.core, f.snap = snaptest.Clients(core, snaps...)
	c, err := New(ctx, Config{RoleConfig: snapshotcontroller.RoleConfig{Client: f.core, Snap: f.snap, Metrics: opmetrics.New(f.reg)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stopEvents)
	f.c = c
	return f
}

// refresh rebuilds the listers from the fake API.
func (f *fixture) refresh() {
	t, ctx, all := f.t, f.ctx, metav1.ListOptions{}
	g, _ := f.snap.GroupsnapshotV1().VolumeGroupSnapshots("").List(ctx, all)
	gc, _ := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().List(ctx, all)
	cl, _ := f.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().List(ctx, all)
	vs, _ := f.snap.SnapshotV1().VolumeSnapshots("").List(ctx, all)
	vsc, _ := f.snap.SnapshotV1().VolumeSnapshotContents().List(ctx, all)
	pvc, _ := f.core.CoreV1().PersistentVolumeClaims("").List(ctx, all)
	pv, _ := f.core.CoreV1().PersistentVolumes().List(ctx, all)
	f.c.groups = grouplisters.NewVolumeGroupSnapshotLister(snaptest.Indexer(t, g.Items))
	f.c.contents = grouplisters.NewVolumeGroupSnapshotContentLister(snaptest.Indexer(t, gc.Items))
	f.c.classes = grouplisters.NewVolumeGroupSnapshotClassLister(snaptest.Indexer(t, cl.Items))
	f.c.snapshots = snaplisters.NewVolumeSnapshotLister(snaptest.Indexer(t, vs.Items))
	f.c.snapConts = snaplisters.NewVolumeSnapshotContentLister(snaptest.Indexer(t, vsc.Items))
	f.c.claims = corelisters.NewPersistentVolumeClaimLister(snaptest.Indexer(t, pvc.Items))
	f.c.volumes = corelisters.NewPersistentVolumeLister(snaptest.Indexer(t, pv.Items))
}

// eventually syncs group ns/g until cond holds, at most 20 times.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	for range 20 {
		if cond() {
			return
		}
		f.refresh()
		_ = f.c.sync(f.ctx, ns+"/g")
		_ = f.c.sync(f.ctx, ns+"/h")
	}
	if !cond() {
		f.t.Fatalf("never %s", what)
	}
}

func (f *fixture) group(name string) *groupv1.VolumeGroupSnapshot {
	return snaptest.Find(f.ctx, f.snap.GroupsnapshotV1().VolumeGroupSnapshots(ns), name)
}

func (f *fixture) groupContent(name string) *groupv1.VolumeGroupSnapshotContent {
	return snaptest.Find(f.ctx, f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents(), name)
}

func defaultClass(name string) *groupv1.VolumeGroupSnapshotClass {
	return &groupv1.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{snapshotter.AnnGroupDefaultClass: "true"}},
		Driver: driver, DeletionPolicy: snapv1.VolumeSnapshotContentDelete}
}

func selectorGroup(name string) *groupv1.VolumeGroupSnapshot {
	return &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}}
}

// A dynamic group gets the driver's default class, then a content born with its finalizer
// naming the selected claims' volumes; the group gets its bound finalizer and status. When
// the sidecar reports the members, one bound VolumeSnapshot and content per member appear,
// and the group turns ready.
func TestDynamicGroup(t *testing.T) {
	a, pa := boundClaim("a")
	b, pb := boundClaim("b")
	f := start(t, []runtime.Object{a, pa, b, pb}, defaultClass("gold"), selectorGroup("g"))
	name := snapshotter.GroupContentPrefix + "uid-g"
	f.eventually("created the group content", func() bool { return f.groupContent(name) != nil })
	content := f.groupContent(name)
	if g := f.group("g"); ptr.Deref(g.Spec.VolumeGroupSnapshotClassName, "") != "gold" {
		t.Errorf("default class not set: %v", g.Spec)
	}
	switch {
	case !snapshotter.HasFinalizer(content, snapshotter.FinalizerGroupContentBound):
		t.Errorf("content finalizers %v", content.Finalizers)
	case len(content.Spec.Source.VolumeHandles) != 2 || content.Spec.Source.VolumeHandles[0] != "vol-a" || content.Spec.VolumeGroupSnapshotRef.UID != "uid-g":
		t.Errorf("content spec %+v", content.Spec)
	case content.Spec.DeletionPolicy != snapv1.VolumeSnapshotContentDelete || content.Spec.Driver != driver:
		t.Errorf("content spec %+v", content.Spec)
	}
	f.eventually("bound the group", func() bool {
		g := f.group("g")
		return snapshotter.HasFinalizer(g, snapshotter.FinalizerGroupBound) && g.Status != nil && ptr.Deref(g.Status.BoundVolumeGroupSnapshotContentName, "") == name
	})

	// The sidecar's answer.
	ready, created, size := true, time.Now().UnixNano(), int64(1<<20)
	handle := "group-1"
	content = f.groupContent(name)
	content.Status = &groupv1.VolumeGroupSnapshotContentStatus{VolumeGroupSnapshotHandle: &handle, ReadyToUse: &ready, CreationTime: &metav1.Time{Time: time.Now()},
		VolumeSnapshotInfoList: []groupv1.VolumeSnapshotInfo{
			{VolumeHandle: "vol-a", SnapshotHandle: "snap-a", ReadyToUse: &ready, CreationTime: &created, RestoreSize: &size},
			{VolumeHandle: "vol-b", SnapshotHandle: "snap-b", ReadyToUse: &ready, CreationTime: &created, RestoreSize: &size}}}
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(f.ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("turned the group ready", func() bool {
		g := f.group("g")
		return g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false) && g.Status.CreationTime != nil
	})
	snaptest.CheckOperations(t, f.reg, map[string]int{
		"CreateGroupSnapshot success dynamic " + driver:         1,
		"CreateGroupSnapshotAndReady success dynamic " + driver: 1,
	})
	for _, m := range []struct{ claim, volume, snap string }{{"a", "vol-a", "snap-a"}, {"b", "vol-b", "snap-b"}} {
		vs, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Get(f.ctx, snapshotter.MemberSnapshotName("uid-g", m.volume), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vsc, err := f.snap.SnapshotV1().VolumeSnapshotContents().Get(f.ctx, snapshotter.MemberContentName("uid-g", m.volume), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case snapshotter.GroupOwner(vs) != "g" || !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotInGroup) || ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "") != m.claim:
			t.Errorf("member %s: %+v", vs.Name, vs.ObjectMeta)
		case vs.Status == nil || ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "") != vsc.Name || ptr.Deref(vs.Status.VolumeGroupSnapshotName, "") != "g":
			t.Errorf("member %s status %+v", vs.Name, vs.Status)
		case vsc.Annotations[snapshotter.AnnGroupSnapshotHandle] != handle || vsc.Spec.VolumeSnapshotRef.UID != vs.UID || !snapshotter.HasFinalizer(vsc, snapshotter.FinalizerContentBound):
			t.Errorf("member content %s: %+v %+v", vsc.Name, vsc.ObjectMeta, vsc.Spec)
		case vsc.Status == nil || ptr.Deref(vsc.Status.SnapshotHandle, "") != m.snap || ptr.Deref(vsc.Status.VolumeGroupSnapshotHandle, "") != handle:
			t.Errorf("member content %s status %+v", vsc.Name, vsc.Status)
		}
	}
}

// A group whose selector picks no claim, or whose driver has two default classes, gets an
// error in its status and no content.
func TestGroupErrors(t *testing.T) {
	a, pa := boundClaim("a")
	other := defaultClass("silver")
	f := start(t, []runtime.Object{a, pa}, defaultClass("gold"), other, selectorGroup("g"))
	f.eventually("reported two default classes", func() bool {
		g := f.group("g")
		return g.Status != nil && g.Status.Error != nil && ptr.Deref(g.Status.Error.Message, "") != ""
	})
	if f.groupContent(snapshotter.GroupContentPrefix+"uid-g") != nil {
		t.Error("a content was created without a class")
	}
	lonely := selectorGroup("h")
	lonely.Spec.Source.Selector.MatchLabels = map[string]string{"app": "none"}
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshots(ns).Create(f.ctx, lonely, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("reported the empty selector", func() bool {
		g := f.group("h")
		return g.Status != nil && g.Status.Error != nil && ptr.Deref(g.Status.Error.Message, "") != ""
	})
}

// A pre-provisioned group binds its content (UID and class filled in, finalizer added).
func TestPreProvisionedGroup(t *testing.T) {
	content := &groupv1.VolumeGroupSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "static"},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{VolumeGroupSnapshotRef: corev1.ObjectReference{Name: "g", Namespace: ns},
			DeletionPolicy: snapv1.VolumeSnapshotContentRetain, Driver: driver,
			Source: groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{VolumeGroupSnapshotHandle: "gh", VolumeSnapshotHandles: []string{"s1"}}}}}
	name := "static"
	class := "gold"
	g := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns, UID: "uid-g"},
		Spec: groupv1.VolumeGroupSnapshotSpec{VolumeGroupSnapshotClassName: &class, Source: groupv1.VolumeGroupSnapshotSource{VolumeGroupSnapshotContentName: &name}}}
	f := start(t, nil, defaultClass("gold"), content, g)
	f.eventually("bound the content", func() bool {
		c := f.groupContent("static")
		return c.Spec.VolumeGroupSnapshotRef.UID == "uid-g" && ptr.Deref(c.Spec.VolumeGroupSnapshotClassName, "") == "gold" &&
			snapshotter.HasFinalizer(c, snapshotter.FinalizerGroupContentBound)
	})
	f.eventually("set the group's status", func() bool {
		g := f.group("g")
		return g.Status != nil && ptr.Deref(g.Status.BoundVolumeGroupSnapshotContentName, "") == "static"
	})
}

// Deleting a group of a Delete content: the content is marked and deleted, the members are
// deleted, and the group keeps its bound finalizer until the content is gone. A Retain
// content is marked but kept, and the group is released at once.
func TestDeleteGroup(t *testing.T) {
	for _, policy := range []snapv1.DeletionPolicy{snapv1.VolumeSnapshotContentDelete, snapv1.VolumeSnapshotContentRetain} {
		t.Run(string(policy), func(t *testing.T) {
			now := metav1.Now()
			g := selectorGroup("g")
			g.DeletionTimestamp, g.Finalizers = &now, []string{snapshotter.FinalizerGroupBound}
			cname := snapshotter.GroupContentPrefix + "uid-g"
			g.Status = &groupv1.VolumeGroupSnapshotStatus{BoundVolumeGroupSnapshotContentName: &cname}
			content := &groupv1.VolumeGroupSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: cname, Finalizers: []string{snapshotter.FinalizerGroupContentBound}},
				Spec: groupv1.VolumeGroupSnapshotContentSpec{VolumeGroupSnapshotRef: corev1.ObjectReference{Name: "g", Namespace: ns, UID: "uid-g"},
					DeletionPolicy: policy, Driver: driver, Source: groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: []string{"vol-a"}}}}
			member := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: ns,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: "g", UID: "uid-g"}}}}
			f := start(t, nil, g, content, member)
			f.eventually("deleted the member", func() bool {
				_, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Get(f.ctx, "m", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
			if policy == snapv1.VolumeSnapshotContentDelete {
				// The fake API server deletes at once, finalizers or not: the content is gone,
				// which releases the group.
				f.eventually("deleted the content", func() bool { return f.groupContent(cname) == nil })
			} else {
				f.eventually("marked the retained content", func() bool {
					c := f.groupContent(cname)
					return c != nil && c.Annotations[snapshotter.AnnGroupBeingDeleted] == "yes"
				})
			}
			f.eventually("released the group", func() bool {
				g := f.group("g")
				return g == nil || !snapshotter.HasFinalizer(g, snapshotter.FinalizerGroupBound)
			})
			if policy == snapv1.VolumeSnapshotContentRetain && f.groupContent(cname) == nil {
				t.Error("a Retain content was deleted")
			}
			// Deleted before the group snapshot was taken: both creates are cancelled. The
			// driver is the content's, or the class's once the content is gone (none here).
			owner := driver
			if policy == snapv1.VolumeSnapshotContentDelete {
				owner = "unknown"
			}
			snaptest.CheckOperations(t, f.reg, map[string]int{
				"DeleteGroupSnapshot success dynamic " + owner:        1,
				"CreateGroupSnapshot cancel dynamic " + owner:         1,
				"CreateGroupSnapshotAndReady cancel dynamic " + owner: 1,
			})
		})
	}
}

// A claim restoring from a member holds the group's deletion.
func TestDeleteGroupWaitsForRestore(t *testing.T) {
	now := metav1.Now()
	g := selectorGroup("g")
	g.DeletionTimestamp, g.Finalizers = &now, []string{snapshotter.FinalizerGroupBound}
	member := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: "g", UID: "uid-g"}}}}
	api := snapv1.GroupName
	restoring := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec:   corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{APIGroup: &api, Kind: "VolumeSnapshot", Name: "m"}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	f := start(t, []runtime.Object{restoring}, g, member)
	for range 5 {
		f.refresh()
		if err := f.c.sync(f.ctx, ns+"/g"); err == nil {
			t.Fatal("the deletion of a group with a member being restored from did not wait")
		}
	}
	if _, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Get(f.ctx, "m", metav1.GetOptions{}); err != nil {
		t.Fatalf("the member was deleted while a claim restores from it: %v", err)
	}
	if g := f.group("g"); !snapshotter.HasFinalizer(g, snapshotter.FinalizerGroupBound) {
		t.Fatal("the group was released while a claim restores from a member")
	}
}

// The group sidecar's status.error on the group content reaches the group's status.error,
// with the group not ready and no member snapshot made; once the sidecar reports the group
// ready, the error is gone.
func TestGroupSidecarErrorStatus(t *testing.T) {
	a, pa := boundClaim("a")
	f := start(t, []runtime.Object{a, pa}, defaultClass("gold"), selectorGroup("g"))
	name := snapshotter.GroupContentPrefix + "uid-g"
	f.eventually("bound the group", func() bool {
		g := f.group("g")
		return g != nil && g.Status != nil && ptr.Deref(g.Status.BoundVolumeGroupSnapshotContentName, "") == name
	})
	msg, when := "Failed to create group snapshot: failed to take group snapshot of the volumes [vol-a]: backend busy", metav1.Now()
	content := f.groupContent(name)
	content.Status = &groupv1.VolumeGroupSnapshotContentStatus{Error: &snapv1.VolumeSnapshotError{Message: &msg, Time: &when}}
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(f.ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("copied the sidecar's error", func() bool {
		g := f.group("g")
		return g.Status.Error != nil && ptr.Deref(g.Status.Error.Message, "") == msg
	})
	if g := f.group("g"); ptr.Deref(g.Status.ReadyToUse, false) || g.Status.CreationTime != nil {
		t.Errorf("status of a failed group: %+v", g.Status)
	}
	if list, _ := f.snap.SnapshotV1().VolumeSnapshots(ns).List(f.ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d member snapshots of a group the driver has not made", len(list.Items))
	}

	ready, created, handle := true, time.Now().UnixNano(), "group-1"
	content = f.groupContent(name)
	content.Status = &groupv1.VolumeGroupSnapshotContentStatus{VolumeGroupSnapshotHandle: &handle, ReadyToUse: &ready, CreationTime: &metav1.Time{Time: time.Now()},
		VolumeSnapshotInfoList: []groupv1.VolumeSnapshotInfo{{VolumeHandle: "vol-a", SnapshotHandle: "snap-a", ReadyToUse: &ready, CreationTime: &created}}}
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(f.ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("turned the group ready", func() bool { g := f.group("g"); return ptr.Deref(g.Status.ReadyToUse, false) })
	if g := f.group("g"); g.Status.Error != nil {
		t.Errorf("a ready group kept the error %q", ptr.Deref(g.Status.Error.Message, ""))
	}
}

// A bound group content deleted before its group: the controller keeps the content's bound
// finalizer, does not mark it being-deleted or delete anything, and the group stays ready.
func TestGroupContentDeletedFirst(t *testing.T) {
	a, pa := boundClaim("a")
	f := start(t, []runtime.Object{a, pa}, defaultClass("gold"), selectorGroup("g"))
	name := snapshotter.GroupContentPrefix + "uid-g"
	f.eventually("bound the group", func() bool {
		g := f.group("g")
		return g != nil && g.Status != nil && ptr.Deref(g.Status.BoundVolumeGroupSnapshotContentName, "") == name
	})
	ready, created, handle := true, time.Now().UnixNano(), "group-1"
	content := f.groupContent(name)
	content.Status = &groupv1.VolumeGroupSnapshotContentStatus{VolumeGroupSnapshotHandle: &handle, ReadyToUse: &ready, CreationTime: &metav1.Time{Time: time.Now()},
		VolumeSnapshotInfoList: []groupv1.VolumeSnapshotInfo{{VolumeHandle: "vol-a", SnapshotHandle: "snap-a", ReadyToUse: &ready, CreationTime: &created}}}
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(f.ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("turned the group ready", func() bool { g := f.group("g"); return ptr.Deref(g.Status.ReadyToUse, false) })

	content = f.groupContent(name)
	now := metav1.Now()
	content.DeletionTimestamp = &now
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Update(f.ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.snap.ClearActions()
	for range 3 {
		f.refresh()
		_ = f.c.sync(f.ctx, ns+"/g")
	}
	c, g := f.groupContent(name), f.group("g")
	switch {
	case c == nil || !snapshotter.HasFinalizer(c, snapshotter.FinalizerGroupContentBound):
		t.Fatalf("group content lost its bound finalizer: %+v", c)
	case c.Annotations[snapshotter.AnnGroupBeingDeleted] == "yes":
		t.Error("group content marked being-deleted while its group lives")
	case g.DeletionTimestamp != nil || !ptr.Deref(g.Status.ReadyToUse, false) || g.Status.Error != nil || !snapshotter.HasFinalizer(g, snapshotter.FinalizerGroupBound):
		t.Errorf("group changed by its content's deletion: %+v %+v", g.ObjectMeta, g.Status)
	}
	for _, a := range f.snap.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("delete %s while only the group content is being deleted", a.GetResource().Resource)
		}
	}
	if _, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Get(f.ctx, snapshotter.MemberSnapshotName("uid-g", "vol-a"), metav1.GetOptions{}); err != nil {
		t.Errorf("member snapshot: %v", err)
	}
}
