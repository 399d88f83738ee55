package sidecar

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// SetClaimFinalizer adds (add true) or removes finalizer on pvc and returns the stored
// claim; pvc itself is left alone. It writes with UPDATE, the only write the upstream roles
// of external-provisioner and snapshot-controller grant on claims. pvc is usually an
// informer's copy that may lag the claim just written by someone else, so a conflict is
// retried from a fresh GET (both roles grant get): one stale cache must not leave a
// finalizer behind until the next resync.
func SetClaimFinalizer(ctx context.Context, client kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, finalizer string, add bool) (*corev1.PersistentVolumeClaim, error) {
	claims := client.CoreV1().PersistentVolumeClaims(pvc.Namespace)
	cur, stored := pvc, (*corev1.PersistentVolumeClaim)(nil)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			fresh, err := claims.Get(ctx, pvc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != pvc.UID {
				return apierrors.NewNotFound(corev1.Resource("persistentvolumeclaims"), pvc.Name)
			}
			cur = fresh
		}
		if slices.Contains(cur.Finalizers, finalizer) == add {
			stored = cur
			return nil
		}
		next := cur.DeepCopy()
		if add {
			next.Finalizers = append(next.Finalizers, finalizer)
		} else {
			next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == finalizer })
		}
		out, err := claims.Update(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			cur = nil // read afresh before the retry
			return err
		}
		stored = out
		return nil
	})
	return stored, err
}
