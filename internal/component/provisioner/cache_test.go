package provisioner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
)

func TestCacheTransform(t *testing.T) {
	const driver = "local.kubevol.io"
	tr := cacheTransform(driver)
	meta := func(ann map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "x", UID: "u1", Annotations: ann, Finalizers: []string{pvspec.Finalizer},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}}
	}
	claimRef := &corev1.ObjectReference{Namespace: "ns", Name: "c", UID: "claim-uid"}
	pvOf := func(ann map[string]string, csiDriver string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: meta(ann), Spec: corev1.PersistentVolumeSpec{
			ClaimRef:                      claimRef,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: csiDriver, VolumeHandle: "h"}},
		}, Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased, Message: "m"}}
	}
	apply := func(obj any) any {
		t.Helper()
		out, err := tr(obj)
		if err != nil {
			t.Fatal(err)
		}
		again, err := tr(out) // client-go may transform an object twice
		if err != nil {
			t.Fatal(err)
		}
		return again
	}

	for name, pv := range map[string]*corev1.PersistentVolume{
		"provisioned by us":            pvOf(map[string]string{pvspec.AnnProvisionedBy: driver, corev1.LastAppliedConfigAnnotation: "{}"}, driver),
		"static PV of our driver":      pvOf(nil, driver),
		"other provisioner, our CSI":   pvOf(map[string]string{pvspec.AnnProvisionedBy: "kubernetes.io/gce-pd"}, driver),
		"annotated as ours, other CSI": pvOf(map[string]string{pvspec.AnnProvisionedBy: driver}, "other.csi.io"),
	} {
		got := apply(pv).(*corev1.PersistentVolume)
		if got.ManagedFields != nil || got.Annotations[corev1.LastAppliedConfigAnnotation] != "" {
			t.Errorf("%s: managedFields or last-applied kept", name)
		}
		if got.Spec.CSI == nil || got.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || got.Spec.Capacity == nil ||
			got.Status.Message != "m" || len(got.Finalizers) != 1 {
			t.Errorf("%s: a PV the controllers act on lost fields: %+v", name, got)
		}
	}

	foreign := apply(pvOf(map[string]string{pvspec.AnnProvisionedBy: "other.csi.io"}, "other.csi.io")).(*corev1.PersistentVolume)
	if foreign.Spec.CSI != nil || foreign.Spec.Capacity != nil || foreign.Spec.PersistentVolumeReclaimPolicy != "" || foreign.Status.Message != "" {
		t.Errorf("another driver's PV keeps its spec or status: %+v", foreign)
	}
	if foreign.Name != "x" || foreign.Spec.ClaimRef != claimRef || foreign.Status.Phase != corev1.VolumeReleased || foreign.ManagedFields != nil {
		t.Errorf("another driver's PV lost its name, claimRef or phase, or kept managedFields: %+v", foreign)
	}
	if pvspec.ProvisionedBy(foreign, driver) {
		t.Error("a stripped foreign PV reads as ours")
	}

	claim := apply(&corev1.PersistentVolumeClaim{ObjectMeta: meta(map[string]string{pvspec.AnnSelectedNode: "n", corev1.LastAppliedConfigAnnotation: "{}"}),
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			Conditions: []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing}}}}).(*corev1.PersistentVolumeClaim)
	if claim.Status.Phase != corev1.ClaimBound || claim.Status.Capacity != nil || claim.Status.Conditions != nil {
		t.Errorf("claim status: %+v, want the phase only", claim.Status)
	}
	if claim.Spec.VolumeName != "pv" || claim.Annotations[pvspec.AnnSelectedNode] != "n" || claim.ManagedFields != nil {
		t.Errorf("claim: spec or annotations lost, or managedFields kept: %+v", claim)
	}
	// Claims are written back with an update, which would drop an annotation missing here.
	if claim.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
		t.Errorf("claim lost its last-applied annotation: %+v", claim.Annotations)
	}

	node := apply(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"topology.kubevol.io/node": "n"}, Annotations: map[string]string{"a": "b"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}, Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"i"}}}}}).(*corev1.Node)
	if node.Name != "n" || node.Labels["topology.kubevol.io/node"] != "n" {
		t.Errorf("node lost its name or topology label: %+v", node)
	}
	if node.Annotations != nil || node.Spec.PodCIDR != "" || node.Status.Images != nil {
		t.Errorf("node keeps what no controller reads: %+v", node)
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "x", Obj: claim}
	if got := apply(tomb); got != any(tomb) {
		t.Errorf("a tombstone is changed: %+v", got)
	}
}
