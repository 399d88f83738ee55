package groupcontroller

import (
	"fmt"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

// assignSnapshotUIDs makes the fake API give each VolumeSnapshot it creates a new UID, as the
// API server does (the fake tracker gives none), so a snapshot made again is told apart.
func (f *fixture) assignSnapshotUIDs() {
	n := 0
	f.snap.PrependReactor("create", "volumesnapshots", func(a clienttesting.Action) (bool, runtime.Object, error) {
		vs := a.(clienttesting.CreateAction).GetObject().(*snapv1.VolumeSnapshot)
		n++
		vs.UID = types.UID(fmt.Sprintf("uid-%s-%d", vs.Name, n))
		if err := f.snap.Tracker().Create(a.GetResource(), vs, vs.Namespace); err != nil {
			return true, nil, err
		}
		return true, vs, nil
	})
}

// groupWithMember drives the dynamic group g of claim a until the sidecar's answer (one
// member of volume vol-a, ready or not) has made its member, and returns the member's names.
func groupWithMember(t *testing.T, ready bool) (f *fixture, vsName, vscName string) {
	t.Helper()
	a, pa := boundClaim("a")
	f = start(t, []runtime.Object{a, pa}, defaultClass("gold"), selectorGroup("g"))
	f.assignSnapshotUIDs()
	name := snapshotter.GroupContentPrefix + "uid-g"
	f.eventually("bound the group", func() bool {
		g := f.group("g")
		return g.Status != nil && ptr.Deref(g.Status.BoundVolumeGroupSnapshotContentName, "") == name
	})
	created, handle := time.Now().UnixNano(), "group-1"
	content := f.groupContent(name)
	content.Status = &groupv1.VolumeGroupSnapshotContentStatus{VolumeGroupSnapshotHandle: &handle, ReadyToUse: &ready, CreationTime: &metav1.Time{Time: time.Now()},
		VolumeSnapshotInfoList: []groupv1.VolumeSnapshotInfo{{VolumeHandle: "vol-a", SnapshotHandle: "snap-a", ReadyToUse: &ready, CreationTime: &created}}}
	if _, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(f.ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vsName, vscName = snapshotter.MemberSnapshotName("uid-g", "vol-a"), snapshotter.MemberContentName("uid-g", "vol-a")
	f.eventually("bound the member", func() bool {
		vs := f.member(vsName)
		vsc, _ := f.snap.SnapshotV1().VolumeSnapshotContents().Get(f.ctx, vscName, metav1.GetOptions{})
		return vs != nil && vsc != nil && vs.UID != "" && vsc.Spec.VolumeSnapshotRef.UID == vs.UID
	})
	if g := f.group("g"); ptr.Deref(g.Status.ReadyToUse, false) != ready {
		t.Fatalf("group ready = %v, want %v", ptr.Deref(g.Status.ReadyToUse, false), ready)
	}
	return f, vsName, vscName
}

func (f *fixture) member(name string) *snapv1.VolumeSnapshot {
	vs, err := f.snap.SnapshotV1().VolumeSnapshots(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return vs
}

func (f *fixture) deleteMember(name string) {
	f.t.Helper()
	// The fake API deletes at once, finalizers or not: as if they had been removed by hand.
	if err := f.snap.SnapshotV1().VolumeSnapshots(ns).Delete(f.ctx, name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// Members whose group is gone are the garbage collector's (their owner reference) and the
// snapshot-controller's (the in-group finalizer goes once the group is gone): a sync of
// the gone group's key, which their events cause, writes nothing.
func TestOrphanMembersOfGoneGroup(t *testing.T) {
	vscName, handle := "member-content", "snap-a"
	member := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: ns, UID: "uid-m",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: "g", UID: "uid-g"}},
		Finalizers:      []string{snapshotter.FinalizerSnapshotInGroup}},
		Status: &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &vscName, VolumeGroupSnapshotName: new("g")}}
	content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: vscName, Finalizers: []string{snapshotter.FinalizerContentBound},
		Annotations: map[string]string{snapshotter.AnnGroupSnapshotHandle: "group-1"}},
		Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: "m", Namespace: ns, UID: "uid-m"},
			DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Driver: driver, Source: snapv1.VolumeSnapshotContentSource{VolumeHandle: new("vol-a")}},
		Status: &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle}}
	f := start(t, nil, member, content)
	if key := memberGroupKey(member); key != ns+"/g" {
		t.Fatalf("a member's events wake %q, want its group's key", key)
	}
	f.snap.ClearActions()
	f.refresh()
	if err := f.c.sync(f.ctx, ns+"/g"); err != nil {
		t.Fatalf("sync of a gone group: %v", err)
	}
	for _, a := range f.snap.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("%s %s for the members of a gone group", v, a.GetResource().Resource)
		}
	}
	if m := f.member("m"); m == nil || !snapshotter.HasFinalizer(m, snapshotter.FinalizerSnapshotInGroup) {
		t.Errorf("member of a gone group changed: %+v", m)
	}
}

// A member snapshot of a ready group that is gone (its finalizers removed by hand) is not
// made again: upstream makes members only while the group is not ready. Its content is
// kept, bound to the snapshot that was: the controller deletes no content for a snapshot
// that is missing.
func TestReadyGroupMemberGone(t *testing.T) {
	f, vsName, vscName := groupWithMember(t, true)
	old := f.member(vsName).UID
	f.deleteMember(vsName)
	f.syncs("g", 3)
	if vs := f.member(vsName); vs != nil {
		t.Errorf("member of a ready group made again (uid %s)", vs.UID)
	}
	if g := f.group("g"); !ptr.Deref(g.Status.ReadyToUse, false) || g.Status.Error != nil {
		t.Errorf("group status %+v after a member went", g.Status)
	}
	vsc, err := f.snap.SnapshotV1().VolumeSnapshotContents().Get(f.ctx, vscName, metav1.GetOptions{})
	if err != nil || vsc.Spec.VolumeSnapshotRef.UID != old {
		t.Errorf("member content %v, err %v: want it kept, bound to %s", vsc, err, old)
	}
}

// A member snapshot gone while its group is not ready yet is made again and its content
// bound to the new snapshot, as upstream rebinds the content to the snapshot it creates: a
// content left bound to the old UID would make the new member misbound for good.
func TestUnreadyGroupMemberRemade(t *testing.T) {
	f, vsName, vscName := groupWithMember(t, false)
	stale := f.member(vsName)
	old := stale.UID
	f.deleteMember(vsName)
	f.eventually("made the member again", func() bool { vs := f.member(vsName); return vs != nil && vs.UID != old })
	vs := f.member(vsName)
	vsc, err := f.snap.SnapshotV1().VolumeSnapshotContents().Get(f.ctx, vscName, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Fatal(err)
	case vsc.Spec.VolumeSnapshotRef.UID != vs.UID:
		t.Errorf("member content bound to %s, want the new member %s", vsc.Spec.VolumeSnapshotRef.UID, vs.UID)
	case vs.Status == nil || ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "") != vscName || snapshotter.GroupOwner(vs) != "g":
		t.Errorf("new member %+v %+v", vs.ObjectMeta, vs.Status)
	}

	// A cache that still holds the deleted member does not turn the content back to it.
	f.refresh()
	f.c.snapshots = snaplisters.NewVolumeSnapshotLister(snaptest.Indexer(t, []snapv1.VolumeSnapshot{*stale}))
	_ = f.c.sync(f.ctx, ns+"/g")
	if vsc, _ = f.snap.SnapshotV1().VolumeSnapshotContents().Get(f.ctx, vscName, metav1.GetOptions{}); vsc.Spec.VolumeSnapshotRef.UID != vs.UID {
		t.Errorf("member content rebound to %s from a stale cache, want %s", vsc.Spec.VolumeSnapshotRef.UID, vs.UID)
	}
}
