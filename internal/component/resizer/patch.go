package resizer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// patchClaimStatus writes the difference between old and cur through the claim's status
// subresource with PATCH, the verb external-resizer's RBAC grants (persistentvolumeclaims/
// status: patch). Annotations ride along, as upstream's do. With checkVersion the patch
// carries old's resourceVersion, so that a change computed from a stale cache fails with a
// conflict instead of overwriting a newer claim (upstream's addResourceVersionCheck).
func (c *Controller) patchClaimStatus(ctx context.Context, old, cur *corev1.PersistentVolumeClaim, checkVersion bool) (*corev1.PersistentVolumeClaim, error) {
	var opts []write.Option
	if checkVersion {
		opts = append(opts, write.Checked())
	}
	saved, err := c.claimWriter.WriteStatus(ctx, old, cur, opts...)
	if err != nil {
		return old, fmt.Errorf("patching the status of claim %s/%s: %w", old.Namespace, old.Name, err)
	}
	return saved, nil
}

// patchClaim sends a patch built here (an annotation) to the claim's status subresource.
func (c *Controller) patchClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pt types.PatchType, data []byte) (*corev1.PersistentVolumeClaim, error) {
	return c.claimWriter.SendStatusPatch(ctx, pvc, pt, data)
}

// writePV sends a patch built here (an annotation) to the PV.
func (c *Controller) writePV(ctx context.Context, pv *corev1.PersistentVolume, pt types.PatchType, data []byte) (*corev1.PersistentVolume, error) {
	return c.pvWriter.SendPatch(ctx, pv, pt, data)
}

// patchPV writes the difference between old and cur with PATCH (persistentvolumes: patch).
func (c *Controller) patchPV(ctx context.Context, old, cur *corev1.PersistentVolume) (*corev1.PersistentVolume, error) {
	saved, err := c.pvWriter.Write(ctx, old, cur)
	if err != nil {
		return old, fmt.Errorf("patching PV %s: %w", old.Name, err)
	}
	return saved, nil
}
