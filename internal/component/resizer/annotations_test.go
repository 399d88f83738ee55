package resizer

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An expansion the controller finished alone marks the claim node-expansion-not-required;
// the next one, which needs the node, takes the mark away.
func TestNodeExpansionNotRequired(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "2Gi", nil)
	drv := newModifyDriver()
	e := newSyncEnv(t, drv, Config{}, pvc, pv)
	e.syncUntil("data", "expanded and marked", 1, func(c *corev1.PersistentVolumeClaim) bool {
		return storageQ(c.Status.Capacity) == gi(2) && c.Annotations[AnnNodeExpansionNotRequired] == "true"
	})
	drv.setRespond(func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
		return &csi.ControllerExpandVolumeResponse{NodeExpansionRequired: true}, nil
	})
	e.setRequest("data", "3Gi")
	got := e.syncUntil("data", "NodeResizePending", 1, func(c *corev1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == corev1.PersistentVolumeClaimNodeResizePending
	})
	if _, ok := got.Annotations[AnnNodeExpansionNotRequired]; ok {
		t.Errorf("annotations = %v: %s stayed on an expansion the node must finish", got.Annotations, AnnNodeExpansionNotRequired)
	}
}

// AnnotateFsResize: the PV remembers the claim's size from before an expansion the node
// must finish, until the node finished it; without the gate it never does.
func TestAnnotateFsResize(t *testing.T) {
	for _, gate := range []bool{true, false} {
		pvc, pv := volume("data", driverName, "1Gi", "3Gi", nil)
		drv := newModifyDriver()
		drv.setRespond(func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
			return &csi.ControllerExpandVolumeResponse{NodeExpansionRequired: true}, nil
		})
		e := newSyncEnv(t, drv, Config{AnnotateFsResize: gate}, pvc, pv)
		e.syncUntil("data", "NodeResizePending", 1, func(c *corev1.PersistentVolumeClaim) bool {
			return resizeStatus(c) == corev1.PersistentVolumeClaimNodeResizePending
		})
		pvNow := func() *corev1.PersistentVolume {
			p, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, "pv-data", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		if got, want := pvNow().Annotations[AnnPreResizeCapacity], map[bool]string{true: "1Gi", false: ""}[gate]; got != want {
			t.Fatalf("gate %v: %s = %q, want %q", gate, AnnPreResizeCapacity, got, want)
		}
		if !gate {
			continue
		}
		// The node finishes: capacity reached, no resize status.
		c := e.claim("data")
		c.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("3Gi")
		c.Status.AllocatedResourceStatuses = nil
		c.Status.Conditions = nil
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(e.ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.expand("data"); err != nil {
			t.Fatal(err)
		}
		if metav1.HasAnnotation(pvNow().ObjectMeta, AnnPreResizeCapacity) {
			t.Fatalf("%s stayed after the node finished: %v", AnnPreResizeCapacity, pvNow().Annotations)
		}
	}
}
