package snapshotter

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

// Retain keeps the content and the backend snapshot when the snapshot goes, and deleting
// the retained content later keeps the backend snapshot; a Delete-policy content deleted
// first stays until its snapshot is deleted, then both go with the backend snapshot.
func TestDeletionPolicies(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.claim("src", "16Mi", nil)
	e.waitBound("src")
	retain := e.snapshotClass(e.driver, snapv1.VolumeSnapshotContentRetain, nil, false)

	// Retain, snapshot deleted first.
	kept := e.waitReady(e.snapshotOf("kept", "src", &retain).Name)
	keptContent := ptr.Deref(kept.Status.BoundVolumeSnapshotContentName, "")
	keptHandle := ptr.Deref(e.content(keptContent).Status.SnapshotHandle, "")
	if snapshotter.HasFinalizer(kept, snapshotter.FinalizerSnapshotBound) {
		t.Errorf("a Retain snapshot has %s", snapshotter.FinalizerSnapshotBound)
	}
	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSnapshotGone("kept")
	c := e.content(keptContent)
	if c.DeletionTimestamp != nil || c.Annotations[snapshotter.AnnBeingDeleted] != "yes" || !snapshotter.HasFinalizer(c, snapshotter.FinalizerContentBound) {
		t.Errorf("retained content: deletion %v, annotations %v, finalizers %v; want kept, marked being-deleted, with its finalizer", c.DeletionTimestamp, c.Annotations, c.Finalizers)
	}
	if err := e.snap.SnapshotV1().VolumeSnapshotContents().Delete(e.ctx, keptContent, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitContentGone(keptContent)
	if e.backendSnapshots()[keptHandle] == nil {
		t.Errorf("backend snapshot %s of a Retain content was deleted", keptHandle)
	}
	e.deleteBackend(keptHandle)

	// Delete, content deleted first: it waits for its snapshot.
	vs := e.waitReady(e.snapshotOf("gone", "src", nil).Name)
	name := ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "")
	handle := ptr.Deref(e.content(name).Status.SnapshotHandle, "")
	if err := e.snap.SnapshotV1().VolumeSnapshotContents().Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nothing can make the content go before its snapshot does; the snapshot stays usable.
	if c := e.content(name); c.DeletionTimestamp == nil || !snapshotter.HasFinalizer(c, snapshotter.FinalizerContentBound) {
		t.Fatalf("content %s: deletion %v, finalizers %v", name, c.DeletionTimestamp, c.Finalizers)
	}
	if e.backendSnapshots()[handle] == nil {
		t.Fatalf("backend snapshot %s deleted while its VolumeSnapshot exists", handle)
	}
	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSnapshotGone("gone")
	e.waitContentGone(name)
	if e.backendSnapshots()[handle] != nil {
		t.Errorf("backend snapshot %s survived", handle)
	}
}

func (e *env) deleteBackend(id string) {
	e.t.Helper()
	cctx, cancel := e.conn.WithTimeout(e.ctx)
	defer cancel()
	if _, err := e.conn.Controller.DeleteSnapshot(cctx, &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
		e.t.Fatal(err)
	}
}

// createBackend takes a snapshot of volumeID through CSI, as an administrator would before
// pre-provisioning it.
func (e *env) createBackend(name, volumeID string) *csi.Snapshot {
	e.t.Helper()
	cctx, cancel := e.conn.WithTimeout(e.ctx)
	defer cancel()
	rsp, err := e.conn.Controller.CreateSnapshot(cctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		e.t.Fatal(err)
	}
	return rsp.GetSnapshot()
}
