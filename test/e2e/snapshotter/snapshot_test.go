package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

// A snapshot of a mounted claim, from the driver's default class, becomes ready with
// upstream's status and finalizers; a claim restored from it mounts with the data; deleting
// it (Delete policy) deletes the content and the backend snapshot.
func TestSnapshotAndRestore(t *testing.T) {
	e := newEnv(t, envOptions{agent: true})
	e.claim("src", "16Mi", nil)
	dir := e.mountOf(e.podOn("writer", "src"))
	want := []byte("written before the snapshot\n")
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	src := e.waitBound("src")

	e.snapshotOf("snap", "src", nil)
	vs := e.waitReady("snap")
	st := vs.Status
	contentName := snapshotter.ContentPrefix + string(vs.UID)
	switch {
	case ptr.Deref(vs.Spec.VolumeSnapshotClassName, "") != e.class:
		t.Errorf("spec.volumeSnapshotClassName = %q, want the default class %s", ptr.Deref(vs.Spec.VolumeSnapshotClassName, ""), e.class)
	case ptr.Deref(st.BoundVolumeSnapshotContentName, "") != contentName:
		t.Errorf("boundVolumeSnapshotContentName = %q, want %s", ptr.Deref(st.BoundVolumeSnapshotContentName, ""), contentName)
	case st.CreationTime == nil || st.RestoreSize == nil || st.Error != nil:
		t.Errorf("status %+v: want creationTime and restoreSize, no error", st)
	}
	for _, f := range []string{snapshotter.FinalizerSnapshotAsSource, snapshotter.FinalizerSnapshotBound} {
		if !snapshotter.HasFinalizer(vs, f) {
			t.Errorf("snapshot lacks finalizer %s: %v", f, vs.Finalizers)
		}
	}
	content := e.content(contentName)
	handle := ptr.Deref(content.Status.SnapshotHandle, "")
	switch {
	case !snapshotter.HasFinalizer(content, snapshotter.FinalizerContentBound):
		t.Errorf("content lacks its finalizer: %v", content.Finalizers)
	case content.Spec.VolumeSnapshotRef.UID != vs.UID || content.Spec.DeletionPolicy != snapv1.VolumeSnapshotContentDelete:
		t.Errorf("content spec %+v", content.Spec)
	case ptr.Deref(content.Spec.Source.VolumeHandle, "") != e.pvOf(src).Spec.CSI.VolumeHandle:
		t.Errorf("content source %v, want the claim's volume", content.Spec.Source)
	case content.Annotations[snapshotter.AnnBeingCreated] != "":
		t.Errorf("content still has %s", snapshotter.AnnBeingCreated)
	case e.backendSnapshots()[handle] == nil:
		t.Errorf("backend has no snapshot %s", handle)
	}
	// The source claim is released once no unready snapshot names it.
	e.waitClaim("src", "released by the snapshot-controller", func(p []string) bool { return !contains(p, snapshotter.FinalizerPVCAsSource) })

	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("written after the snapshot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.claim("restored", "16Mi", vs)
	got, err := os.ReadFile(filepath.Join(e.mountOf(e.podOn("reader", "restored")), "data.txt"))
	if err != nil || string(got) != string(want) {
		t.Fatalf("restored claim has %q (%v), want %q", got, err, want)
	}

	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSnapshotGone("snap")
	e.waitContentGone(contentName)
	if e.backendSnapshots()[handle] != nil {
		t.Errorf("backend snapshot %s survived its Delete-policy content", handle)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// waitClaim waits until the claim's finalizers satisfy cond.
func (e *env) waitClaim(name, what string, cond func([]string) bool) {
	e.t.Helper()
	e.waitGone(name+" "+what, func(ctx context.Context) error {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && cond(pvc.Finalizers) {
			return notFound
		}
		return err
	})
}
