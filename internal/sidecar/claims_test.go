package sidecar

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
