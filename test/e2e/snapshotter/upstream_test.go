package snapshotter

import (
	"context"
	"testing"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

// Each role works with the other role's upstream counterpart: objects are written here as
// upstream's snapshot-controller and csi-snapshotter write them.
func TestUpstreamObjects(t *testing.T) {
	e := newEnv(t, envOptions{noSnapshotter: true})
	e.claim("src", "16Mi", nil)
	src := e.waitBound("src")
	handle := e.pvOf(src).Spec.CSI.VolumeHandle

	t.Run("csi-snapshotter with upstream's snapshot-controller", func(t *testing.T) {
		p := e.startSnapshotter("--snapshot-controller=false")
		defer p.Stop()
		// Upstream's controller creates the content without a finalizer and adds it in a
		// second write; kubevol's sidecar waits for it before CreateSnapshot.
		vs := e.snapshotOf("by-upstream-controller", "src", &e.class)
		content := &snapv1.VolumeSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{Name: snapshotter.ContentPrefix + string(vs.UID)},
			Spec: snapv1.VolumeSnapshotContentSpec{
				VolumeSnapshotRef:       corev1.ObjectReference{Kind: "VolumeSnapshot", APIVersion: "snapshot.storage.k8s.io/v1", Namespace: e.ns, Name: vs.Name, UID: vs.UID, ResourceVersion: vs.ResourceVersion},
				DeletionPolicy:          snapv1.VolumeSnapshotContentDelete,
				Driver:                  e.driver,
				VolumeSnapshotClassName: &e.class,
				Source:                  snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle},
				SourceVolumeMode:        ptr.To(corev1.PersistentVolumeFilesystem),
			},
		}
		content, err := e.snap.SnapshotV1().VolumeSnapshotContents().Create(e.ctx, content, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if c := e.content(content.Name); c.Status != nil && c.Status.SnapshotHandle != nil {
			t.Fatalf("CreateSnapshot before the content had its finalizer: %+v", c.Status)
		}
		content.Finalizers = []string{snapshotter.FinalizerContentBound}
		if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Update(e.ctx, content, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		done := e.waitContent(content.Name, func(c *snapv1.VolumeSnapshotContent) bool {
			return c.Status != nil && ptr.Deref(c.Status.ReadyToUse, false) && c.Status.CreationTime != nil && c.Annotations[snapshotter.AnnBeingCreated] == ""
		})
		id := ptr.Deref(done.Status.SnapshotHandle, "")
		if e.backendSnapshots()[id] == nil {
			t.Fatalf("no backend snapshot %q", id)
		}
		// Upstream's controller deletes a Delete-policy content after marking it.
		done.Annotations = map[string]string{snapshotter.AnnBeingDeleted: "yes"}
		if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Update(e.ctx, done, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.snap.SnapshotV1().VolumeSnapshotContents().Delete(e.ctx, done.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitContentGone(done.Name)
		if e.backendSnapshots()[id] != nil {
			t.Errorf("backend snapshot %s survived", id)
		}
		e.removeFinalizers(vs.Name) // upstream's controller would; none runs here
	})

	t.Run("snapshot-controller with upstream's csi-snapshotter", func(t *testing.T) {
		p := e.startSnapshotter("--csi-snapshotter=false")
		defer p.Stop()
		vs := e.snapshotOf("by-upstream-sidecar", "src", nil)
		name := snapshotter.ContentPrefix + string(vs.UID)
		c := e.waitContent(name, func(*snapv1.VolumeSnapshotContent) bool { return true })
		// Upstream's sidecar: the being-created annotation, then a JSON patch of the status
		// with creationTime in nanoseconds and restoreSize in bytes, then the annotation goes.
		created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
		patch := []byte(`{"status":{"snapshotHandle":"upstream-handle","readyToUse":true,"creationTime":` +
			itoa(created.UnixNano()) + `,"restoreSize":16777216}}`)
		if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Patch(e.ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		ready := e.waitReady(vs.Name)
		want := resource.MustParse("16Mi")
		switch {
		case !ready.Status.CreationTime.Time.Equal(created.Truncate(time.Second)):
			t.Errorf("creationTime %v, want %v", ready.Status.CreationTime, created)
		case ready.Status.RestoreSize == nil || ready.Status.RestoreSize.Cmp(want) != 0:
			t.Errorf("restoreSize %v, want 16Mi", ready.Status.RestoreSize)
		}
		if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, vs.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The controller marks and deletes the content; upstream's sidecar would then remove
		// its finalizer.
		gone := e.waitContent(name, func(c *snapv1.VolumeSnapshotContent) bool {
			return c.DeletionTimestamp != nil && c.Annotations[snapshotter.AnnBeingDeleted] == "yes"
		})
		gone.Finalizers = nil
		if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Update(e.ctx, gone, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitSnapshotGone(vs.Name)
	})
}

func itoa(n int64) string { return resource.NewQuantity(n, resource.DecimalSI).String() }

func (e *env) waitContent(name string, cond func(*snapv1.VolumeSnapshotContent) bool) *snapv1.VolumeSnapshotContent {
	e.t.Helper()
	var last *snapv1.VolumeSnapshotContent
	e.waitGone("content "+name, func(ctx context.Context) error {
		c, err := e.snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
		if err == nil && cond(c) {
			last = c
			return notFound
		}
		return nil
	})
	return last
}

func (e *env) removeFinalizers(vs string) {
	e.t.Helper()
	cur, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Get(e.ctx, vs, metav1.GetOptions{})
	if err != nil {
		return
	}
	cur.Finalizers = nil
	if _, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	_ = e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, vs, metav1.DeleteOptions{})
}
