package provisioner

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
)

// cacheTransform drops from the informers' objects what the controllers never read, which
// is most of an object's size in a large cluster (upstream keeps full objects: ep #587,
// about 40 MiB per 1000 volumes):
//   - from every object, managedFields, and the last-applied annotation except on claims;
//   - from claims, the status except its phase (only a clone source's phase is read);
//   - from PVs of other drivers, everything but the metadata, the claimRef and the phase:
//     the claim controller only asks whether a PV name is taken, and the volume controller
//     skips them;
//   - from Nodes, everything but the name and the labels (topology is read from labels),
//     which in a large cluster is most of the cache: a Node's status lists its images.
//
// Claims are written back with UPDATE (the claim write external-provisioner's role grants),
// so they keep every field an update would otherwise erase: an update ignores a claim's
// status and keeps managedFields it does not carry, but it would drop a missing annotation.
// PV changes are patches. It is idempotent, as client-go requires.
func cacheTransform(driver string) cache.TransformFunc {
	return func(obj any) (any, error) {
		if a, err := meta.Accessor(obj); err == nil {
			a.SetManagedFields(nil)
			if _, claim := obj.(*corev1.PersistentVolumeClaim); !claim && a.GetAnnotations() != nil {
				ann := a.GetAnnotations()
				delete(ann, corev1.LastAppliedConfigAnnotation)
			}
		}
		switch o := obj.(type) {
		case *corev1.PersistentVolumeClaim:
			o.Status = corev1.PersistentVolumeClaimStatus{Phase: o.Status.Phase}
		case *corev1.PersistentVolume:
			ours := pvspec.ProvisionedBy(o, driver) || o.Spec.CSI != nil && o.Spec.CSI.Driver == driver
			if !ours {
				o.Spec = corev1.PersistentVolumeSpec{ClaimRef: o.Spec.ClaimRef}
				o.Status = corev1.PersistentVolumeStatus{Phase: o.Status.Phase}
			}
		case *corev1.Node:
			o.Annotations, o.Spec, o.Status = nil, corev1.NodeSpec{}, corev1.NodeStatus{}
		}
		return obj, nil
	}
}
