package contentwrite

import (
	"context"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

var filter = Filter[*snapv1.VolumeSnapshotContent]{
	BoundFinalizer: snapshotter.FinalizerContentBound, BeingCreated: snapshotter.AnnBeingCreated,
	Ready: func(c *snapv1.VolumeSnapshotContent) bool {
		return c.Status != nil && ptr.Deref(c.Status.ReadyToUse, false)
	},
	Spec: func(c *snapv1.VolumeSnapshotContent) any { return c.Spec },
}

func TestFilterChanged(t *testing.T) {
	base := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "1",
		Annotations: map[string]string{"a": "1"}, Finalizers: []string{"x"}}}
	now := metav1.Now()
	cases := []struct {
		name              string
		edit              func(*snapv1.VolumeSnapshotContent)
		want, wantDeleted bool
	}{
		{"resync", func(*snapv1.VolumeSnapshotContent) {}, true, true},
		{"own being-created write", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			c.Annotations[snapshotter.AnnBeingCreated] = "yes"
		}, false, false},
		{"own status write, not ready", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			c.Status = &snapv1.VolumeSnapshotContentStatus{ReadyToUse: new(false)}
		}, false, false},
		{"turned ready", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			c.Status = &snapv1.VolumeSnapshotContentStatus{ReadyToUse: new(true)}
		}, true, true},
		{"gained the bound finalizer", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			c.Finalizers = append(c.Finalizers, snapshotter.FinalizerContentBound)
		}, true, true},
		{"other finalizer", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			c.Finalizers = nil
		}, false, true},
		{"other annotation", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			delete(c.Annotations, "a")
		}, true, true},
		{"spec", func(c *snapv1.VolumeSnapshotContent) {
			c.ResourceVersion = "2"
			c.Spec.Driver = "d"
		}, true, true},
	}
	for _, tc := range cases {
		for _, deleted := range []bool{false, true} {
			old := base.DeepCopy()
			if deleted {
				old.DeletionTimestamp = &now
			}
			cur := old.DeepCopy()
			tc.edit(cur)
			f, want := filter, tc.want
			if deleted {
				f.FinalizersWhileDeleting, want = true, tc.wantDeleted
			}
			if got := f.Changed(old, cur); got != want {
				t.Errorf("%s (deleted %v): Changed = %v, want %v", tc.name, deleted, got, want)
			}
		}
	}
}

func TestWrites(t *testing.T) {
	ctx := context.Background()
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	snap := snapfake.NewSimpleClientset(&snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u1",
		Finalizers: []string{snapshotter.FinalizerContentBound, "other"}}})
	cl := snap.SnapshotV1().VolumeSnapshotContents()
	cur, err := cl.Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur, err = Annotate(ctx, cl, cur, snapshotter.AnnBeingCreated, true); err != nil || cur.Annotations[snapshotter.AnnBeingCreated] != "yes" {
		t.Fatalf("Annotate on: %v, annotations %v", err, cur.Annotations)
	}
	if cur, err = SetError(ctx, cl, cur, nil, "boom"); err != nil || cur.Status == nil || ptr.Deref(cur.Status.Error.Message, "") != "boom" || ptr.Deref(cur.Status.ReadyToUse, false) {
		t.Fatalf("SetError: %v, status %+v", err, cur.Status)
	}
	snap.ClearActions()
	if _, err = SetError(ctx, cl, cur, new("boom"), "boom"); err != nil || len(snap.Actions()) != 0 {
		t.Fatalf("SetError with the same message wrote: %v, %v", err, snap.Actions())
	}
	if cur, err = Annotate(ctx, cl, cur, snapshotter.AnnBeingCreated, false); err != nil || len(cur.Annotations) != 0 {
		t.Fatalf("Annotate off: %v, annotations %v", err, cur.Annotations)
	}
	if err = RemoveFinalizer(ctx, cl, cur, snapshotter.FinalizerContentBound); err != nil {
		t.Fatal(err)
	}
	if cur, err = cl.Get(ctx, "c", metav1.GetOptions{}); err != nil || len(cur.Finalizers) != 1 || cur.Finalizers[0] != "other" {
		t.Fatalf("RemoveFinalizer: %v, finalizers %v", err, cur.Finalizers)
	}
	if err = Delete(ctx, cl, cur); err != nil {
		t.Fatal(err)
	}
	if err = Delete(ctx, cl, cur); err != nil {
		t.Fatalf("Delete of a content gone: %v", err)
	}
	if err = RemoveFinalizer(ctx, cl, cur, "other"); err != nil {
		t.Fatalf("RemoveFinalizer of a content gone: %v", err)
	}
}
