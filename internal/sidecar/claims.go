package sidecar

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SetClaimFinalizer adds (add true) or removes finalizer on pvc and returns the stored
// claim; pvc itself is left alone. It writes with UPDATE, the only write the upstream roles
// of external-provisioner and snapshot-controller grant on claims, so a claim changed since
// pvc was read gives a conflict, which the caller retries from a fresh copy.
func SetClaimFinalizer(ctx context.Context, client kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, finalizer string, add bool) (*corev1.PersistentVolumeClaim, error) {
	if slices.Contains(pvc.Finalizers, finalizer) == add {
		return pvc, nil
	}
	cur := pvc.DeepCopy()
	if add {
		cur.Finalizers = append(cur.Finalizers, finalizer)
	} else {
		cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == finalizer })
	}
	return client.CoreV1().PersistentVolumeClaims(cur.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
}
