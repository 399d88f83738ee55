package kubecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/resizer"
)

// WaitForClaim polls the claim until cond holds or timeout passes, and returns the last
// version it read (nil if none), for the caller's failure message.
func WaitForClaim(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration, cond func(*corev1.PersistentVolumeClaim) bool) (*corev1.PersistentVolumeClaim, error) {
	var last *corev1.PersistentVolumeClaim
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pvc
		return cond(pvc), nil
	})
	return last, err
}

// Bound holds for a claim the PV controller has bound to its volume.
func Bound(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName != ""
}

// WaitBound waits for the claim to be bound and returns its PersistentVolume.
func WaitBound(ctx context.Context, cs kubernetes.Interface, ns, claim string, timeout time.Duration) (*corev1.PersistentVolume, error) {
	last, err := WaitForClaim(ctx, cs, ns, claim, timeout, Bound)
	if err != nil {
		phase := "never read"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		return nil, fmt.Errorf("claim %s/%s not bound: %w (phase %s)", ns, claim, err, phase)
	}
	return cs.CoreV1().PersistentVolumes().Get(ctx, last.Spec.VolumeName, metav1.GetOptions{})
}

// RequestSize asks for size on the claim, as `kubectl patch pvc` does for an expansion.
func RequestSize(ctx context.Context, cs kubernetes.Interface, ns, claim, size string) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]string{"storage": size}}}})
	_, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Expanded holds for a claim whose expansion to size is over: status.capacity at least
// size, no resize condition and no resize status left.
func Expanded(size string) func(*corev1.PersistentVolumeClaim) bool {
	want := resource.MustParse(size)
	return func(pvc *corev1.PersistentVolumeClaim) bool {
		got := pvc.Status.Capacity[corev1.ResourceStorage]
		return got.Cmp(want) >= 0 && len(pvc.Status.AllocatedResourceStatuses) == 0 && !resizer.Resizing(pvc)
	}
}

// DescribeResize is the part of a claim's status that tells how far an expansion got.
func DescribeResize(pvc *corev1.PersistentVolumeClaim) string {
	if pvc == nil {
		return "never read"
	}
	got := pvc.Status.Capacity[corev1.ResourceStorage]
	return fmt.Sprintf("capacity %s, conditions %v, resize status %v", got.String(), ConditionTypes(pvc), pvc.Status.AllocatedResourceStatuses)
}

// ConditionTypes lists the types of the claim's conditions.
func ConditionTypes(pvc *corev1.PersistentVolumeClaim) []string {
	var out []string
	for _, c := range pvc.Status.Conditions {
		out = append(out, string(c.Type))
	}
	return out
}

// PatchClaimClass sets the claim's VolumeAttributesClass the way `kubectl patch pvc` does:
// a merge patch of the spec, through the apiserver's validation.
func PatchClaimClass(ctx context.Context, cs kubernetes.Interface, ns, claim, class string) error {
	data := []byte(`{"spec":{"volumeAttributesClassName":"` + class + `"}}`)
	_, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, claim, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

// ModifiedTo holds for a claim whose current class is class with nothing of a modification
// left: no modifyVolumeStatus, no ModifyingVolume or ModifyVolumeError condition.
func ModifiedTo(class string) func(*corev1.PersistentVolumeClaim) bool {
	return func(c *corev1.PersistentVolumeClaim) bool {
		return ptr.Deref(c.Status.CurrentVolumeAttributesClassName, "") == class && c.Status.ModifyVolumeStatus == nil &&
			!slices.ContainsFunc(c.Status.Conditions, func(cond corev1.PersistentVolumeClaimCondition) bool {
				return cond.Type == corev1.PersistentVolumeClaimVolumeModifyingVolume || cond.Type == corev1.PersistentVolumeClaimVolumeModifyVolumeError
			})
	}
}

// Modification describes a claim's modifyVolumeStatus and its ModifyVolumeError: the
// driver's refusal shows as `modification to "X" Infeasible (ModifyVolumeError: ...)`.
func Modification(pvc *corev1.PersistentVolumeClaim) string {
	s := pvc.Status.ModifyVolumeStatus
	if s == nil {
		return "no modification pending"
	}
	out := fmt.Sprintf("modification to %q %s", s.TargetVolumeAttributesClassName, s.Status)
	for _, c := range pvc.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimVolumeModifyVolumeError {
			out += fmt.Sprintf(" (%s: %s)", c.Type, c.Message)
		}
	}
	return out
}
