package claim

import (
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
)

// A claim that kube-controller-manager hands to ebs.csi.aws.com for a kubernetes.io/aws-ebs
// class is provisioned from the translated class (fsType becomes the capability's fs_type,
// the other parameters pass), and its PV is written in-tree, provisioned-by the in-tree
// plugin, with the provisioner's finalizer, as external-provisioner writes it.
func TestProvisionsMigratedClaim(t *testing.T) {
	f := newFixtureFor(t, "ebs.csi.aws.com", "kubernetes.io/aws-ebs", map[string]string{"type": "gp3", "fsType": "xfs"})
	var req *csi.CreateVolumeRequest
	f.drv.Hook("CreateVolume", func(r any) error { req = r.(*csi.CreateVolumeRequest); return nil })
	pvc := f.claim("old")
	var pv *corev1.PersistentVolume
	f.waitFor("the PV", func() bool {
		var err error
		pv, err = f.cs.CoreV1().PersistentVolumes().Get(f.ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{})
		return err == nil
	})
	ebs := pv.Spec.AWSElasticBlockStore
	switch {
	case pv.Spec.CSI != nil || ebs == nil:
		t.Fatalf("PV is not in-tree: %+v", pv.Spec.PersistentVolumeSource)
	case ebs.VolumeID != "id-pvc-uid-old" || ebs.FSType != "xfs":
		t.Errorf("in-tree source %+v", ebs)
	case pv.Annotations[pvspec.AnnProvisionedBy] != "kubernetes.io/aws-ebs":
		t.Errorf("provisioned-by %q", pv.Annotations[pvspec.AnnProvisionedBy])
	case !slices.Contains(pv.Finalizers, pvspec.Finalizer):
		t.Errorf("finalizers %v", pv.Finalizers)
	}
	if req == nil || req.GetParameters()["type"] != "gp3" || req.GetParameters()["fsType"] != "" ||
		req.GetVolumeCapabilities()[0].GetMount().GetFsType() != "xfs" {
		t.Errorf("CreateVolume request %v", req)
	}
}
