package snapshotter

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// A snapshot of a claim bound to an in-tree PV of a migrated plugin stays refused, as
// upstream's snapshot-controller refuses it (CSI migration does not cover snapshots), and the
// refusal is an event on the snapshot that says so and names the driver.
func TestInTreeSnapshotRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	pvName := "intree-" + e.ns
	empty := ""
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0123456789abcdef0"}},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.ns, Name: "old"},
		},
	}
	if _, err := e.cs.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	claim := framework.ClaimSpec("old", empty, "16Mi")
	claim.Spec.VolumeName = pvName
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitBound("old")
	e.snapshotOf("old-snap", "old", &e.class)
	e.waitEvent(e.ns, "old-snap", "SnapshotPVCSourceMissing", "snapshots of in-tree volumes are not supported")
	e.waitEvent(e.ns, "old-snap", "SnapshotPVCSourceMissing", "ebs.csi.aws.com")
}
