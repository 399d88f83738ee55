package controllertest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// labeller is the smallest controller: its sync labels the PV of the key, from its lister,
// and records an event.
type labeller struct{ f *Fixture }

func (l labeller) sync(ctx context.Context, name string) error {
	pv, err := l.f.Informers.Core().V1().PersistentVolumes().Lister().Get(name)
	if err != nil {
		return err
	}
	pv = pv.DeepCopy()
	pv.Labels = map[string]string{"synced": "yes"}
	if _, err := l.f.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return err
	}
	l.f.Recorder.Event(pv, corev1.EventTypeNormal, "Labelled", "labelled "+name)
	return nil
}

func pv(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// A sync reads the objects the fixture was given, its actions and events are checked, and
// the next sync sees its write.
func TestSyncSeesTheStoreAndRecordsActionsAndEvents(t *testing.T) {
	f := New(t, pv("a"))
	l := labeller{f}
	if err := Sync(f, l.sync, "a"); err != nil {
		t.Fatal(err)
	}
	f.ExpectActions("update persistentvolumes")
	f.ExpectEvents("Normal Labelled labelled a")
	if got := f.Actions(); len(got) != 0 {
		t.Fatalf("ExpectActions left %q", got)
	}
	// The write reached the store; Sync feeds it to the lister.
	if err := Sync(f, l.sync, "a"); err != nil {
		t.Fatalf("a sync on the fed cache: %v", err)
	}
	got, err := f.Informers.Core().V1().PersistentVolumes().Lister().Get("a")
	if err != nil || got.Labels["synced"] != "yes" {
		t.Fatalf("lister after Sync: %v, %v", got, err)
	}
	if err := Sync(f, l.sync, "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("sync of a missing key: %v, want NotFound", err)
	}
	f.ExpectActions()
}

// A write from a stale cache is refused with a conflict, as the apiserver refuses it.
func TestStaleWriteConflicts(t *testing.T) {
	f := New(t, pv("a"))
	stale, err := f.Informers.Core().V1().PersistentVolumes().Lister().Get("a")
	if err != nil {
		t.Fatal(err)
	}
	if stale.ResourceVersion == "" {
		t.Fatal("an added object has no resourceVersion")
	}
	fresh := stale.DeepCopy()
	fresh.Labels = map[string]string{"by": "someone else"}
	if _, err := f.Client.CoreV1().PersistentVolumes().Update(f.Ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Without Feed the lister still holds the old version, and the sync's update conflicts.
	l := labeller{f}
	f.Client.ClearActions()
	if err := l.sync(f.Ctx, "a"); !apierrors.IsConflict(err) {
		t.Fatalf("update from a stale cache: %v, want a conflict", err)
	}
	f.ExpectActions("update persistentvolumes")
	f.ExpectEvents()
}

// Lists and watches are not actions a test expects.
func TestActionsLeaveOutListsAndWatches(t *testing.T) {
	f := New(t)
	if _, err := f.Client.CoreV1().PersistentVolumes().List(f.Ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	f.ExpectActions("get persistentvolumes")
}
