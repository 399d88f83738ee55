package groupcontroller

import (
	"strings"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

// events replaces the controller's recorder with one the test reads.
func (f *fixture) events() *record.FakeRecorder {
	rec := record.NewFakeRecorder(100)
	f.c.recorder = rec
	return rec
}

// syncs syncs group ns/name n times, each over listers rebuilt from the fake API.
func (f *fixture) syncs(name string, n int) {
	for range n {
		f.refresh()
		_ = f.c.sync(f.ctx, ns+"/"+name)
	}
}

// misboundContent is a content named name whose spec.volumeGroupSnapshotRef names ref; static
// makes it pre-provisioned.
func misboundContent(name string, ref corev1.ObjectReference, static bool) *groupv1.VolumeGroupSnapshotContent {
	c := &groupv1.VolumeGroupSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{VolumeGroupSnapshotRef: ref, DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Driver: driver,
			Source: groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: []string{"vol-a"}}}}
	if static {
		c.Spec.Source = groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{VolumeGroupSnapshotHandle: "gh", VolumeSnapshotHandles: []string{"s1"}}}
	}
	return c
}

// A content whose spec.volumeGroupSnapshotRef names another group (or a former group of the
// same name) is not bound, as upstream: the group reports GroupSnapshotContentMisbound
// ("... is bound to a different group snapshot") in an event and in status.error with
// readyToUse false, also when it was ready; the content is left as it is, and the group
// gets no bound finalizer and no members.
func TestMisboundContent(t *testing.T) {
	dynName := snapshotter.GroupContentPrefix + "uid-g"
	other := corev1.ObjectReference{Namespace: ns, Name: "other", UID: "uid-other"}
	former := corev1.ObjectReference{Namespace: ns, Name: "g", UID: "uid-former"}
	cases := []struct {
		name    string
		content *groupv1.VolumeGroupSnapshotContent
		static  bool
		ready   bool // the group was bound and ready before the content changed
	}{
		{"dynamic, another group", misboundContent(dynName, other, false), false, false},
		{"dynamic, a former group of the same name", misboundContent(dynName, former, false), false, false},
		{"dynamic, ready group", misboundContent(dynName, other, false), false, true},
		{"pre-provisioned, another group", misboundContent("static", corev1.ObjectReference{Namespace: ns, Name: "other"}, true), true, false},
		{"pre-provisioned, a former group of the same name", misboundContent("static", former, true), true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, pa := boundClaim("a")
			g := selectorGroup("g")
			if tc.static {
				name := tc.content.Name
				g.Spec.Source = groupv1.VolumeGroupSnapshotSource{VolumeGroupSnapshotContentName: &name}
			}
			if tc.ready {
				ready, name := true, tc.content.Name
				g.Finalizers = []string{snapshotter.FinalizerGroupBound}
				g.Status = &groupv1.VolumeGroupSnapshotStatus{BoundVolumeGroupSnapshotContentName: &name, ReadyToUse: &ready, CreationTime: &metav1.Time{Time: time.Now()}}
			}
			class := "gold"
			g.Spec.VolumeGroupSnapshotClassName = &class
			f := start(t, []runtime.Object{a, pa}, defaultClass("gold"), tc.content, g)
			rec := f.events()
			f.syncs("g", 3)

			got := f.group("g")
			st := got.Status
			switch {
			case st == nil || st.Error == nil || !strings.Contains(ptr.Deref(st.Error.Message, ""), "is bound to a different group snapshot"):
				t.Errorf("group status %+v, want the misbound error", st)
			case ptr.Deref(st.ReadyToUse, false):
				t.Error("a group whose content is bound elsewhere is still ready")
			}
			if !snaptest.SawEvent(rec, "Warning "+reasonContentMisbound) {
				t.Errorf("no %s warning", reasonContentMisbound)
			}
			if snapshotter.HasFinalizer(got, snapshotter.FinalizerGroupBound) != tc.ready {
				t.Errorf("group finalizers %v: the bound finalizer added to a misbound group", got.Finalizers)
			}
			if c := f.groupContent(tc.content.Name); !equality.Semantic.DeepEqual(c.Spec, tc.content.Spec) || len(c.Finalizers) != 0 || len(c.Annotations) != 0 {
				t.Errorf("misbound content changed: %+v %+v", c.ObjectMeta, c.Spec)
			}
			if list, _ := f.snap.SnapshotV1().VolumeSnapshots(ns).List(f.ctx, metav1.ListOptions{}); len(list.Items) != 0 {
				t.Errorf("%d member snapshots made for a misbound content", len(list.Items))
			}
		})
	}
}
