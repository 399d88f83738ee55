package resizer

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Names external-resizer's modify controller shares with the provisioner and users.
const (
	// The keys --extra-modify-metadata adds to the parameters.
	paramPVCName      = "csi.storage.k8s.io/pvc/name"
	paramPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	paramPVName       = "csi.storage.k8s.io/pv/name"

	// Event reasons on the claim, as external-resizer records them.
	reasonModify          = "VolumeModify"
	reasonModifyFailed    = "VolumeModifyFailed"
	reasonModified        = "VolumeModifySuccessful"
	reasonModifyCancelled = "VolumeModifyCancelled"

	modifyingMessage = "ModifyVolume operation in progress."
)

// markModify records a modification that is not finished: its state (InProgress, Infeasible,
// Pending) and target, and the condition that says so, as upstream writes them:
// ModifyingVolume while it runs, ModifyVolumeError with the driver's error after a failure,
// and the conditions left as they are for Pending. The patch carries the claim's
// resourceVersion, so a decision made from a stale cache is retried from fresh data.
func (c *Controller) markModify(ctx context.Context, pvc *corev1.PersistentVolumeClaim, state corev1.PersistentVolumeClaimModifyVolumeStatus, target string, cause error) (*corev1.PersistentVolumeClaim, error) {
	updated := pvc.DeepCopy()
	updated.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{Status: state, TargetVolumeAttributesClassName: target}
	if state != corev1.PersistentVolumeClaimModifyVolumePending {
		cond := corev1.PersistentVolumeClaimCondition{Type: corev1.PersistentVolumeClaimVolumeModifyingVolume, Status: corev1.ConditionTrue, Message: modifyingMessage}
		if cause != nil {
			cond.Type = corev1.PersistentVolumeClaimVolumeModifyVolumeError
			cond.Message = "ModifyVolume failed with error: " + cause.Error() + ". Waiting for retry."
		}
		updated.Status.Conditions = setModifyCondition(updated.Status.Conditions, cond)
	}
	return c.patchClaimStatus(ctx, pvc, updated, true)
}

// modifyDone records a finished modification: the PV names the class first, then the claim
// (currentVolumeAttributesClassName, no modifyVolumeStatus, no modify conditions), so a
// crash in between leaves the claim InProgress and the (idempotent) call is repeated.
func (c *Controller) modifyDone(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, class string) error {
	newPV := pv.DeepCopy()
	newPV.Spec.VolumeAttributesClassName = ptr.To(class)
	if _, err := c.patchPV(ctx, pv, newPV); err != nil {
		return fmt.Errorf("setting the class of PV %s: %w", pv.Name, err)
	}
	updated := pvc.DeepCopy()
	updated.Status.ModifyVolumeStatus = nil
	updated.Status.CurrentVolumeAttributesClassName = ptr.To(class)
	updated.Status.Conditions = setModifyCondition(updated.Status.Conditions)
	if _, err := c.patchClaimStatus(ctx, pvc, updated, false); err != nil {
		return fmt.Errorf("marking the claim as modified: %w", err)
	}
	return nil
}

// modifyCancelled clears the modify conditions of a claim whose class was taken back
// before it was applied; the last modifyVolumeStatus stays as the record of what happened.
func (c *Controller) modifyCancelled(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if !slices.ContainsFunc(pvc.Status.Conditions, isModifyCondition) {
		return nil
	}
	updated := pvc.DeepCopy()
	updated.Status.Conditions = setModifyCondition(updated.Status.Conditions)
	if _, err := c.patchClaimStatus(ctx, pvc, updated, true); err != nil {
		return err
	}
	c.recorder.Event(pvc, corev1.EventTypeNormal, reasonModifyCancelled, "Cancelled modify.")
	return nil
}

func isModifyCondition(cond corev1.PersistentVolumeClaimCondition) bool {
	return cond.Type == corev1.PersistentVolumeClaimVolumeModifyingVolume || cond.Type == corev1.PersistentVolumeClaimVolumeModifyVolumeError
}

// setModifyCondition replaces the modify conditions with want (none if omitted) and leaves
// the resize conditions alone. An unchanged condition keeps its transition time, so a retry
// does not rewrite the claim for nothing.
func setModifyCondition(conds []corev1.PersistentVolumeClaimCondition, want ...corev1.PersistentVolumeClaimCondition) []corev1.PersistentVolumeClaimCondition {
	var out []corev1.PersistentVolumeClaimCondition
	var kept []corev1.PersistentVolumeClaimCondition
	for _, cond := range conds {
		if isModifyCondition(cond) {
			kept = append(kept, cond)
		} else {
			out = append(out, cond)
		}
	}
	for _, w := range want {
		w.LastTransitionTime = metav1.Now()
		for _, k := range kept {
			if k.Type == w.Type && k.Status == w.Status && k.Message == w.Message {
				w.LastTransitionTime = k.LastTransitionTime
			}
		}
		out = append(out, w)
	}
	return out
}
