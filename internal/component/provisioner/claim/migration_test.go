package claim

import (
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
)

// A claim that kube-controller-manager hands to ebs.csi.aws.com for a kubernetes.io/aws-ebs
// class is provisioned from the translated class (fsType becomes the capability's fs_type,
// the other parameters pass), and its PV is written in-tree, provisioned-by the in-tree
// plugin, with the provisioner's finalizer, as external-provisioner writes it.
func TestProvisionsMigratedClaim(t *testing.T) {
	f := newSyncFixtureWith(t, syncOptions{driver: "ebs.csi.aws.com", provisioner: "kubernetes.io/aws-ebs",
		params: map[string]string{"type": "gp3", "fsType": "xfs"}})
	var req *csi.CreateVolumeRequest
	f.drv.Hook("CreateVolume", func(r any) error { req = r.(*csi.CreateVolumeRequest); return nil })
	pvc := f.claim("old")
	if err := f.sync(pvc); err != nil {
		t.Fatal(err)
	}
	pv, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
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
