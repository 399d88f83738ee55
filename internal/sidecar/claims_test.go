package sidecar

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The upstream roles grant update, not patch, on claims: the finalizer is written with an
// update, and only when it changes.
func TestSetClaimFinalizerUpdates(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Finalizers: []string{"other"}}}
	cs := fake.NewClientset(pvc)
	ctx := context.Background()
	got, err := SetClaimFinalizer(ctx, cs, pvc, "mine", true)
	if err != nil || len(got.Finalizers) != 2 {
		t.Fatalf("add: %v %v", got.Finalizers, err)
	}
	if _, err := SetClaimFinalizer(ctx, cs, got, "mine", true); err != nil {
		t.Fatal(err)
	}
	got, err = SetClaimFinalizer(ctx, cs, got, "mine", false)
	if err != nil || len(got.Finalizers) != 1 || got.Finalizers[0] != "other" {
		t.Fatalf("remove: %v %v", got.Finalizers, err)
	}
	var verbs []string
	for _, a := range cs.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if len(verbs) != 2 || verbs[0] != "update" || verbs[1] != "update" {
		t.Errorf("requests %v, want two updates (none for the no-op)", verbs)
	}
}

// A stale copy (an informer's, just after another writer) gets a conflict; the finalizer is
// then written on a fresh GET instead of being left for the next resync.
func TestSetClaimFinalizerRetriesConflict(t *testing.T) {
	stale := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", Finalizers: []string{"mine"}}}
	fresh := stale.DeepCopy()
	fresh.Finalizers = append(fresh.Finalizers, "other")
	cs := fake.NewClientset(fresh)
	conflictOnce(cs)
	got, err := SetClaimFinalizer(context.Background(), cs, stale, "mine", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 1 || got.Finalizers[0] != "other" {
		t.Errorf("finalizers %v, want [other]: the retry must start from the fresh claim", got.Finalizers)
	}

	// A claim re-created under the same name is not the one the caller meant.
	cs = fake.NewClientset(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u2", Finalizers: []string{"mine"}}})
	conflictOnce(cs)
	if _, err := SetClaimFinalizer(context.Background(), cs, stale, "mine", false); !apierrors.IsNotFound(err) {
		t.Errorf("re-created claim: err %v, want NotFound", err)
	}
}

// conflictOnce makes the first claim update on cs fail with a conflict.
func conflictOnce(cs *fake.Clientset) {
	conflicts := 1
	cs.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(corev1.Resource("persistentvolumeclaims"), "c", nil)
		}
		return false, nil, nil
	})
}
