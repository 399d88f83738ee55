package resizer

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

const (
	// AnnPreResizeCapacity is upstream's AnnotateFsResize annotation on a PV: the claim's
	// capacity before an expansion that the node has yet to finish. The kubelet reads it
	// when a claim is deleted and re-created meanwhile, so the node expansion still runs.
	AnnPreResizeCapacity = "volume.alpha.kubernetes.io/pre-resize-capacity"
	// AnnNodeExpansionNotRequired is set on a claim whose expansion the controller finished
	// alone, so that the kubelet does not try a node expansion; it goes when the next
	// expansion starts, as upstream's resizer does it.
	AnnNodeExpansionNotRequired = "volume.kubernetes.io/node-expansion-not-required"
)

// annotationPatch is a JSON merge patch that sets (or, with a nil value, removes) one
// annotation: it carries no resourceVersion, as it changes nothing a decision rests on.
func annotationPatch(key string, value *string) []byte {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	return data
}

// recordPreResize sets AnnPreResizeCapacity on the PV of an expansion the node must finish,
// unless an earlier round set it (its size is the one from before all of them).
func (c *Controller) recordPreResize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if !c.cfg.AnnotateFsResize || metav1.HasAnnotation(pv.ObjectMeta, AnnPreResizeCapacity) {
		return nil
	}
	old := pvc.Status.Capacity[corev1.ResourceStorage]
	size := old.String()
	_, err := c.writePV(ctx, pv, types.MergePatchType, annotationPatch(AnnPreResizeCapacity, &size))
	if err != nil {
		return fmt.Errorf("annotating PV %s with its size before the expansion: %w", pv.Name, err)
	}
	return nil
}

// dropPreResize removes AnnPreResizeCapacity once the node finished: the claim's capacity
// reached the PV's and no node expansion is pending.
func (c *Controller) dropPreResize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if !c.cfg.AnnotateFsResize || !metav1.HasAnnotation(pv.ObjectMeta, AnnPreResizeCapacity) {
		return nil
	}
	capacity, pvSize := pvc.Status.Capacity[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
	switch pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] {
	case corev1.PersistentVolumeClaimNodeResizePending, corev1.PersistentVolumeClaimNodeResizeInProgress:
		return nil
	}
	if capacity.Cmp(pvSize) < 0 {
		return nil
	}
	_, err := c.writePV(ctx, pv, types.MergePatchType, annotationPatch(AnnPreResizeCapacity, nil))
	if err != nil {
		return fmt.Errorf("removing %s from PV %s: %w", AnnPreResizeCapacity, pv.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Node expansion finished, size before it forgotten", "annotation", AnnPreResizeCapacity)
	return nil
}

// setNodeExpansionNotRequired sets or clears AnnNodeExpansionNotRequired through the claim's
// status (the subresource the resizer may patch, which takes metadata as well) and returns
// the claim as saved.
func (c *Controller) setNodeExpansionNotRequired(ctx context.Context, pvc *corev1.PersistentVolumeClaim, on bool) (*corev1.PersistentVolumeClaim, error) {
	if metav1.HasAnnotation(pvc.ObjectMeta, AnnNodeExpansionNotRequired) == on {
		return pvc, nil
	}
	var value *string
	if on {
		value = new(string)
		*value = "true"
	}
	saved, err := c.patchClaim(ctx, pvc, types.MergePatchType, annotationPatch(AnnNodeExpansionNotRequired, value))
	if err != nil {
		return pvc, fmt.Errorf("setting %s on the claim: %w", AnnNodeExpansionNotRequired, err)
	}
	return saved, nil
}
