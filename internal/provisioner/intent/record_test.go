package intent

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The instances of a --node-deployment provisioner share the driver's finalizer: each must
// see only its own records, or one node's restart would clean up (and forget) another
// node's CreateVolume while it may still be running.
func TestRecordsAreTheirNodes(t *testing.T) {
	ctx := context.Background()
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "uid-1"}}
	cs := fake.NewClientset(claim)
	nodeA := New(cs, "local.kubevol.io", "node-a")
	stored, err := nodeA.Add(ctx, claim, Record{PVName: "pvc-uid-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		j    *Journal
		want bool
	}{
		{"the writing node", New(cs, "local.kubevol.io", "node-a"), true},
		{"another node", New(cs, "local.kubevol.io", "node-b"), false},
		{"a central provisioner", New(cs, "local.kubevol.io", ""), false},
		{"another driver", New(cs, "other.example.com", "node-a"), false},
	} {
		if _, ok := c.j.Parse(stored); ok != c.want {
			t.Errorf("%s: Parse = %v, want %v", c.name, ok, c.want)
		}
		recs, err := c.j.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(recs) == 1; got != c.want {
			t.Errorf("%s: Load found %d records, want ours=%v", c.name, len(recs), c.want)
		}
	}

	// A record that cannot be read, with the shared finalizer: a central provisioner takes it
	// (it is the driver's only instance); a node's instance cannot tell whose it is.
	broken := stored.DeepCopy()
	broken.Annotations[Annotation] = "{"
	if _, ok := New(cs, "local.kubevol.io", "").Parse(broken); !ok {
		t.Error("central provisioner: an unreadable record with our finalizer is not ours")
	}
	if _, ok := New(cs, "local.kubevol.io", "node-a").Parse(broken); ok {
		t.Error("node instance: an unreadable record with the shared finalizer was taken as ours")
	}
}

// The API server refuses a new finalizer on a claim being deleted with 403, as it refuses a
// missing right: that claim must get no CreateVolume, so Add fails instead of degrading to
// an in-memory record (a crash would then leak the volume).
func TestDeletingClaimIsNotUnrecorded(t *testing.T) {
	ctx := context.Background()
	now := metav1.Now()
	deleting := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "uid-1",
		DeletionTimestamp: &now, Finalizers: []string{"kubernetes.io/pvc-protection"}}}
	cs := fake.NewClientset(deleting)
	cs.PrependReactor("update", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("persistentvolumeclaims"), "data", errors.New("no new finalizers can be added if the object is being deleted"))
	})
	j := New(cs, "local.kubevol.io", "")
	// The provisioner's cache may not show the deletion yet.
	cached := deleting.DeepCopy()
	cached.DeletionTimestamp = nil
	_, err := j.Add(ctx, cached, Record{PVName: "pvc-uid-1"})
	if err == nil || errors.Is(err, ErrUnrecorded) {
		t.Fatalf("Add on a claim being deleted: %v, want an error other than ErrUnrecorded", err)
	}
	if _, ok := j.Get("uid-1"); ok {
		t.Error("a record for the deleting claim is kept in memory")
	}

	// A live claim whose update is refused is a missing right: the record degrades.
	live := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: "ns", UID: "uid-2"}}
	if err := cs.Tracker().Add(live); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Add(ctx, live, Record{PVName: "pvc-uid-2"}); !errors.Is(err, ErrUnrecorded) {
		t.Fatalf("Add on a live claim refused by RBAC: %v, want ErrUnrecorded", err)
	}
}
