package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// AttributesClass creates the VolumeAttributesClass name of driverName; the test's cleanup
// deletes it.
func AttributesClass(ctx context.Context, t testing.TB, cs kubernetes.Interface, name, driverName string, params map[string]string) string {
	t.Helper()
	_, err := cs.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: driverName, Parameters: params,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().VolumeAttributesClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// PatchClaimClass sets the claim's class the way `kubectl patch pvc` does: a merge patch of
// the spec, by the admin, through the apiserver's validation.
func PatchClaimClass(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns, claim, class string) {
	t.Helper()
	data := []byte(`{"spec":{"volumeAttributesClassName":"` + class + `"}}`)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, claim, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatalf("kubectl patch pvc %s: %v", claim, err)
	}
}

// ClaimModifiedTo holds for a claim whose current class is class with nothing of a
// modification left: no modifyVolumeStatus, no ModifyingVolume or ModifyVolumeError
// condition.
func ClaimModifiedTo(class string) func(*corev1.PersistentVolumeClaim) bool {
	return func(c *corev1.PersistentVolumeClaim) bool {
		if ptr.Deref(c.Status.CurrentVolumeAttributesClassName, "") != class || c.Status.ModifyVolumeStatus != nil {
			return false
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == corev1.PersistentVolumeClaimVolumeModifyingVolume || cond.Type == corev1.PersistentVolumeClaimVolumeModifyVolumeError {
				return false
			}
		}
		return true
	}
}
