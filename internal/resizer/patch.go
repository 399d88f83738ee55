package resizer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/controller"
	"github.com/kubevol/kubevol/internal/sidecar"
)

// patchClaimStatus writes the difference between old and cur through the claim's status
// subresource with PATCH, the verb external-resizer's RBAC grants (persistentvolumeclaims/
// status: patch). Annotations ride along, as upstream's do.
func (c *Controller) patchClaimStatus(ctx context.Context, old, cur *corev1.PersistentVolumeClaim, checkVersion bool) (*corev1.PersistentVolumeClaim, error) {
	// With checkVersion the patch carries old's resourceVersion, so that a change computed
	// from a stale cache fails with a conflict instead of overwriting a newer claim
	// (upstream's addResourceVersionCheck).
	patch := sidecar.TwoWayPatch
	if checkVersion {
		patch = sidecar.VersionedPatch
	}
	data, changed, err := patch(old, cur)
	if err != nil || !changed {
		return old, err
	}
	saved, err := c.patchClaim(ctx, old, types.StrategicMergePatchType, data)
	if err != nil {
		return old, fmt.Errorf("patching the status of claim %s/%s: %w", old.Namespace, old.Name, err)
	}
	return saved, nil
}

// patchClaim is every claim write of the resizer: a patch of the status subresource. The
// version it wrote over is remembered (see superseded).
func (c *Controller) patchClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pt types.PatchType, data []byte) (*corev1.PersistentVolumeClaim, error) {
	saved, err := c.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, pt, data, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, controller.WriteFailed(ctx, c.recorder, pvc, "patch", "persistentvolumeclaims/status", err)
	}
	if saved.ResourceVersion != pvc.ResourceVersion {
		c.superseded.add(pvc.Namespace+"/"+pvc.Name, pvc.ResourceVersion)
	}
	return saved, nil
}

// writePV is every PV write of the resizer, a patch; the version it wrote over is
// remembered, as for claims: a claim synced against an older cached PV (one not grown
// yet) would expand the volume again.
func (c *Controller) writePV(ctx context.Context, pv *corev1.PersistentVolume, pt types.PatchType, data []byte) (*corev1.PersistentVolume, error) {
	saved, err := c.cfg.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, pt, data, metav1.PatchOptions{})
	if err != nil {
		return nil, controller.WriteFailed(ctx, c.recorder, pv, "patch", "persistentvolumes", err)
	}
	if saved.ResourceVersion != pv.ResourceVersion {
		c.superseded.add(pvKey(pv.Name), pv.ResourceVersion)
	}
	return saved, nil
}

// pvKey is a PV's key among the superseded versions, apart from the claims' keys (which
// hold a slash).
func pvKey(name string) string { return name }

// patchPV writes the difference between old and cur with PATCH (persistentvolumes: patch).
func (c *Controller) patchPV(ctx context.Context, old, cur *corev1.PersistentVolume) (*corev1.PersistentVolume, error) {
	data, changed, err := sidecar.TwoWayPatch(old, cur)
	if err != nil || !changed {
		return old, err
	}
	saved, err := c.writePV(ctx, old, types.StrategicMergePatchType, data)
	if err != nil {
		return old, fmt.Errorf("patching PV %s: %w", old.Name, err)
	}
	return saved, nil
}
