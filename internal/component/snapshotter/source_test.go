package snapshotter

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Snapshots of in-tree volumes stay refused under CSI migration, as upstream's; the message
// (the controllers' event) says why and names the driver the plugin migrated to.
func TestCheckVolumeInTree(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u"}}
	ref := &corev1.ObjectReference{Name: "c", Namespace: "ns", UID: "u"}
	ebs := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: corev1.PersistentVolumeSpec{ClaimRef: ref,
		PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "v-1"}}}}
	err := CheckVolume(ebs, pvc)
	if err == nil || !strings.Contains(err.Error(), "in-tree") || !strings.Contains(err.Error(), "ebs.csi.aws.com") {
		t.Errorf("in-tree EBS PV: %v", err)
	}
	nfs := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: corev1.PersistentVolumeSpec{ClaimRef: ref,
		PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}}}}
	if err := CheckVolume(nfs, pvc); err == nil || !strings.Contains(err.Error(), "not a CSI volume") {
		t.Errorf("NFS PV: %v", err)
	}
}
