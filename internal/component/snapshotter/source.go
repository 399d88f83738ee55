package snapshotter

import (
	"fmt"
	"slices"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kubevol/kubevol/internal/runtime/migration"
)

// CheckVolume reports what makes pv unfit as the snapshot source of claim pvc: it must
// point back to the claim and be a CSI volume.
func CheckVolume(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) error {
	ref := pv.Spec.ClaimRef
	switch {
	case ref == nil || ref.Name != pvc.Name || ref.Namespace != pvc.Namespace || (ref.UID != "" && ref.UID != pvc.UID):
		return fmt.Errorf("volume %s is not bound to claim %s", pv.Name, pvc.Name)
	case migration.IsInTreePV(pv):
		// Upstream's snapshot-controller refuses them too: CSI migration covers
		// provisioning, attaching, mounting and expansion, not snapshots.
		src := migration.CSISource(pv)
		driver := ""
		if src != nil {
			driver = src.Driver
		}
		return fmt.Errorf("volume %s of claim %s is an in-tree volume (migrated to CSI driver %s): snapshots of in-tree volumes are not supported, also under CSI migration; only CSI volumes can be snapshotted", pv.Name, pvc.Name, driver)
	case pv.Spec.CSI == nil:
		return fmt.Errorf("volume %s of claim %s is not a CSI volume: only CSI volumes can be snapshotted", pv.Name, pvc.Name)
	}
	return nil
}

// DefaultClasses returns, sorted, the names of the classes of driver that carry the default
// annotation ann with the value "true" (the only value upstream takes).
func DefaultClasses[T metav1.Object](all []T, driverOf func(T) string, driver, ann string) []string {
	var out []string
	for _, cl := range all {
		if driverOf(cl) == driver && cl.GetAnnotations()[ann] == "true" {
			out = append(out, cl.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// RestoringClaim names a Pending claim of the snapshot's namespace whose data source (or
// data source reference in the same namespace) is the snapshot: upstream keeps a snapshot
// being deleted until such a claim is provisioned.
func RestoringClaim(claims corelisters.PersistentVolumeClaimLister, vs *snapv1.VolumeSnapshot) (string, error) {
	all, err := claims.PersistentVolumeClaims(vs.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	for _, pvc := range all {
		if pvc.Status.Phase != corev1.ClaimPending {
			continue
		}
		for _, ds := range []*corev1.TypedLocalObjectReference{pvc.Spec.DataSource, typedLocal(pvc.Spec.DataSourceRef)} {
			if ds != nil && ds.Kind == "VolumeSnapshot" && ds.APIGroup != nil && *ds.APIGroup == snapv1.GroupName && ds.Name == vs.Name {
				return pvc.Name, nil
			}
		}
	}
	return "", nil
}

func typedLocal(r *corev1.TypedObjectReference) *corev1.TypedLocalObjectReference {
	if r == nil || (r.Namespace != nil && *r.Namespace != "") {
		return nil
	}
	return &corev1.TypedLocalObjectReference{APIGroup: r.APIGroup, Kind: r.Kind, Name: r.Name}
}
