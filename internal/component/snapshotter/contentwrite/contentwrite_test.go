package contentwrite

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
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

// The writes go with the role's verbs: update for metadata, a merge patch to the status
// (SetError's carrying the resourceVersion read).
func TestWrites(t *testing.T) {
	ctx := context.Background()
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	snap := snapfake.NewSimpleClientset(&snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u1", ResourceVersion: "7",
		Finalizers: []string{snapshotter.FinalizerContentBound, "other"}}})
	var wire []string
	snap.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		w := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			w += "/" + sub
		}
		if p, ok := a.(clienttesting.PatchAction); ok {
			w += " " + string(p.GetPatchType())
			var body map[string]any
			_ = json.Unmarshal(p.GetPatch(), &body)
			if md, _ := body["metadata"].(map[string]any); md != nil {
				w += " rv=" + md["resourceVersion"].(string)
			}
		}
		if a.GetVerb() != "get" {
			wire = append(wire, w)
		}
		return false, nil, nil
	})
	w := snapshotter.VolumeSnapshotContents(snap, write.Update)
	cl := snap.SnapshotV1().VolumeSnapshotContents()
	cur, err := cl.Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur, err = Annotate(ctx, w, cur, snapshotter.AnnBeingCreated, true); err != nil || cur.Annotations[snapshotter.AnnBeingCreated] != "yes" {
		t.Fatalf("Annotate on: %v, annotations %v", err, cur.Annotations)
	}
	if cur, err = SetError(ctx, w, cur, nil, "boom"); err != nil || cur.Status == nil || ptr.Deref(cur.Status.Error.Message, "") != "boom" || ptr.Deref(cur.Status.ReadyToUse, false) {
		t.Fatalf("SetError: %v, status %+v", err, cur.Status)
	}
	if _, err = SetError(ctx, w, cur, new("boom"), "boom"); err != nil {
		t.Fatalf("SetError with the same message: %v", err)
	}
	if cur, err = PatchStatus(ctx, w, cur, map[string]any{"readyToUse": true}); err != nil || !ptr.Deref(cur.Status.ReadyToUse, false) {
		t.Fatalf("PatchStatus: %v, status %+v", err, cur.Status)
	}
	if cur, err = Annotate(ctx, w, cur, snapshotter.AnnBeingCreated, false); err != nil || len(cur.Annotations) != 0 {
		t.Fatalf("Annotate off: %v, annotations %v", err, cur.Annotations)
	}
	if err = Delete(ctx, w, cl, cur); err != nil {
		t.Fatal(err)
	}
	if err = Delete(ctx, w, cl, cur); err != nil {
		t.Fatalf("Delete of a content gone: %v", err)
	}
	want := []string{
		"update volumesnapshotcontents",
		"patch volumesnapshotcontents/status application/merge-patch+json rv=7",
		"patch volumesnapshotcontents/status application/merge-patch+json",
		"update volumesnapshotcontents",
		"delete volumesnapshotcontents",
		"delete volumesnapshotcontents",
	}
	if !slices.Equal(wire, want) {
		t.Errorf("writes\n%v\nwant\n%v", strings.Join(wire, "\n"), strings.Join(want, "\n"))
	}
}

// A refused write is reported once, on the object given (the content by default), and a
// refused annotation returns the copy sent.
func TestRefusedWritesAreReported(t *testing.T) {
	ctx := context.Background()
	content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u1"}}
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	snap := snapfake.NewSimpleClientset(content)
	snap.PrependReactor("*", "volumesnapshotcontents", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "get" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents"}, "c", errors.New("RBAC"))
	})
	rec := record.NewFakeRecorder(10)
	w := snapshotter.VolumeSnapshotContents(snap, write.Update)
	w.Recorder = rec
	sent, err := Annotate(ctx, w, content, snapshotter.AnnBeingCreated, true)
	if !apierrors.IsForbidden(err) || sent.Annotations[snapshotter.AnnBeingCreated] != "yes" || content.Annotations != nil {
		t.Errorf("Annotate: %v, returned %v, given %v", err, sent.Annotations, content.Annotations)
	}
	if _, err = SetError(ctx, w, content, nil, "boom"); !apierrors.IsForbidden(err) {
		t.Errorf("SetError: %v", err)
	}
	if err = Delete(ctx, w, snap.SnapshotV1().VolumeSnapshotContents(), content); !apierrors.IsForbidden(err) {
		t.Errorf("Delete: %v", err)
	}
	for _, want := range []string{"cannot update volumesnapshotcontents: ", "cannot patch volumesnapshotcontents/status: ", "cannot delete volumesnapshotcontents: "} {
		if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning "+controller.ReasonWriteFailed+" "+want) {
			t.Errorf("event %q, want %q", ev, want)
		}
	}
	if len(rec.Events) != 0 {
		t.Errorf("%d events more than one per refused write", len(rec.Events))
	}
}
