package migration

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// The annotation is the kubelet's value: all seven plugins, sorted, comma-separated.
func TestMigratedPlugins(t *testing.T) {
	want := "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
	if got := MigratedPlugins(); got != want {
		t.Errorf("MigratedPlugins() = %q, want %q", got, want)
	}
}

func TestNames(t *testing.T) {
	for driver, inTree := range map[string]string{
		"ebs.csi.aws.com": "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io": "kubernetes.io/gce-pd",
		"cinder.csi.openstack.org": "kubernetes.io/cinder", "local.kubevol.io": "",
	} {
		if got := InTreeName(driver); got != inTree {
			t.Errorf("InTreeName(%s) = %q, want %q", driver, got, inTree)
		}
		if inTree != "" && CSIName(inTree) != driver {
			t.Errorf("CSIName(%s) = %q, want %s", inTree, CSIName(inTree), driver)
		}
	}
	if CSIName("kubernetes.io/nfs") != "" {
		t.Error("nfs is not migrated")
	}
}

// A CSI PV stays as it is; an in-tree one is translated without being modified; one of a
// plugin that is not migrated is refused.
func TestPVToCSI(t *testing.T) {
	csiPV := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		CSI: &corev1.CSIPersistentVolumeSource{Driver: "x", VolumeHandle: "h"}}}}
	if got, err := PVToCSI(klog.Background(), csiPV); err != nil || got != csiPV {
		t.Errorf("CSI PV: %v, %v", got, err)
	}
	ebs := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-1"}}}}
	got, err := PVToCSI(klog.Background(), ebs)
	if err != nil || got.Spec.CSI == nil || got.Spec.CSI.Driver != "ebs.csi.aws.com" || got.Spec.CSI.VolumeHandle != "vol-1" {
		t.Fatalf("EBS PV: %+v, %v", got, err)
	}
	if ebs.Spec.CSI != nil || ebs.Spec.AWSElasticBlockStore == nil {
		t.Error("PVToCSI modified its input")
	}
	if !IsInTreePV(ebs) || IsInTreePV(csiPV) || Handle(ebs) != "vol-1" {
		t.Errorf("IsInTreePV/Handle: %v %v %q", IsInTreePV(ebs), IsInTreePV(csiPV), Handle(ebs))
	}
	nfs := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "nfs"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}}}}
	if _, err := PVToCSI(klog.Background(), nfs); err == nil || !strings.Contains(err.Error(), "nfs") {
		t.Errorf("NFS PV: %v", err)
	}
	if CSISource(nfs) != nil {
		t.Error("an NFS PV has no CSI source")
	}
}

// The attach/detach controller's inline spec is CSI already; an in-tree one is translated.
func TestSpecToCSI(t *testing.T) {
	spec := &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "v-1"}}}
	got, err := SpecToCSI(klog.Background(), spec)
	if err != nil || got.CSI.Driver != "cinder.csi.openstack.org" || got.CSI.VolumeHandle != "v-1" {
		t.Fatalf("%+v, %v", got, err)
	}
	if again, err := SpecToCSI(klog.Background(), got); err != nil || again != got {
		t.Errorf("a CSI spec is kept: %v", err)
	}
}

// An inline volume becomes the PV the kubelet mounts: <driver>-<handle>.
func TestVolumeToCSI(t *testing.T) {
	v := &corev1.Volume{Name: "disk", VolumeSource: corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "v-abc"}}}
	if !IsInTreeVolume(v) {
		t.Fatal("EBS inline volume not migratable")
	}
	pv, err := VolumeToCSI(klog.Background(), v, "ns")
	if err != nil || pv.Name != "ebs.csi.aws.com-v-abc" || pv.Spec.CSI.VolumeHandle != "v-abc" {
		t.Fatalf("%+v, %v", pv, err)
	}
}

// A class round trip, as the provisioner makes it: parameters and zones translated, then the
// CSI PV written back in-tree with the zone and region the translation derives.
func TestClassAndPVRoundTrip(t *testing.T) {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "gp2"}, Provisioner: "kubernetes.io/aws-ebs",
		Parameters: map[string]string{"type": "gp2", "fsType": "ext4", "zone": "us-east-1a"}}
	csiClass, err := ClassToCSI(klog.Background(), class)
	if err != nil {
		t.Fatal(err)
	}
	if csiClass.Parameters["csi.storage.k8s.io/fstype"] != "ext4" || csiClass.Parameters["type"] != "gp2" || len(csiClass.AllowedTopologies) != 1 {
		t.Errorf("translated class: %+v", csiClass)
	}
	if class.Parameters["fsType"] != "ext4" || class.AllowedTopologies != nil {
		t.Error("ClassToCSI modified its input")
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "v-1"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.ebs.csi.aws.com/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"us-east-1a"}}},
		}}}},
	}}
	inTree, err := PVToInTree(pv)
	if err != nil {
		t.Fatal(err)
	}
	if inTree.Spec.CSI != nil || inTree.Spec.AWSElasticBlockStore.VolumeID != "v-1" ||
		inTree.Labels[corev1.LabelTopologyZone] != "us-east-1a" || inTree.Labels[corev1.LabelTopologyRegion] != "us-east-1" {
		t.Errorf("in-tree PV: %+v", inTree)
	}
	if pv.Spec.CSI == nil {
		t.Error("PVToInTree modified its input")
	}
}
