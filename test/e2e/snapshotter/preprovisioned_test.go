package snapshotter

import (
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

// A content made by an administrator for an existing backend snapshot binds to the
// snapshot that names it, gets its status from ListSnapshots, and a claim restores from it;
// deleting the snapshot (Delete policy) deletes the backend snapshot. A content that names
// another snapshot is refused with an event that says so, and so is a missing class.
func TestPreProvisioned(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.claim("src", "16Mi", nil)
	src := e.waitBound("src")
	backend := e.createBackend("admin-made", e.pvOf(src).Spec.CSI.VolumeHandle)

	handle := backend.GetSnapshotId()
	content := &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: "pre-" + e.ns},
		Spec: snapv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: e.ns, Name: "static"},
			DeletionPolicy:    snapv1.VolumeSnapshotContentDelete,
			Driver:            e.driver,
			Source:            snapv1.VolumeSnapshotContentSource{SnapshotHandle: &handle},
		},
	}
	if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Create(e.ctx, content, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: e.ns},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &content.Name}}}
	if _, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Create(e.ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := e.waitReady("static")
	bound := e.content(content.Name)
	switch {
	case bound.Spec.VolumeSnapshotRef.UID != ready.UID:
		t.Errorf("content ref uid %q, want %q", bound.Spec.VolumeSnapshotRef.UID, ready.UID)
	case ptr.Deref(bound.Status.SnapshotHandle, "") != handle || bound.Status.RestoreSize == nil || *bound.Status.RestoreSize != backend.GetSizeBytes():
		t.Errorf("content status %+v, want handle %s and size %d from ListSnapshots", bound.Status, handle, backend.GetSizeBytes())
	case !snapshotter.HasFinalizer(bound, snapshotter.FinalizerContentBound):
		t.Errorf("bound content lacks its finalizer")
	}
	e.claim("restored", "16Mi", ready)
	e.waitBound("restored")

	// Misbound: the content names another snapshot.
	other := "other-" + e.ns
	wrong := content.DeepCopy()
	wrong.ObjectMeta = metav1.ObjectMeta{Name: other}
	wrong.Spec.VolumeSnapshotRef = corev1.ObjectReference{Namespace: e.ns, Name: "someone-else"}
	if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Create(e.ctx, wrong, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	misbound := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "misbound", Namespace: e.ns},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &other}}}
	if _, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Create(e.ctx, misbound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(e.ns, "misbound", "SnapshotContentMisbound", "someone-else")
	e.waitSnapshot("misbound", "reports the error", func(vs *snapv1.VolumeSnapshot) bool {
		return vs.Status != nil && vs.Status.Error != nil && !ptr.Deref(vs.Status.ReadyToUse, false)
	})
	if err := e.snap.SnapshotV1().VolumeSnapshotContents().Delete(e.ctx, other, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A class that does not exist.
	missing := "no-such-class"
	e.snapshotOf("noclass", "src", &missing)
	e.waitEvent(e.ns, "noclass", "GetSnapshotClassFailed", missing)

	// Deleting the pre-provisioned snapshot (policy Delete) deletes the backend snapshot,
	// once the restore no longer waits for it.
	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, "static", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSnapshotGone("static")
	e.waitContentGone(content.Name)
	if e.backendSnapshots()[handle] != nil {
		t.Errorf("backend snapshot %s survived its Delete-policy content", handle)
	}
}
