package resizer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An expansion is finished only once the resize conditions are gone: what verify checks at
// the claim level where the size cannot be observed.
func TestResizingConditions(t *testing.T) {
	for typ, want := range map[corev1.PersistentVolumeClaimConditionType]bool{
		corev1.PersistentVolumeClaimResizing:                true,
		corev1.PersistentVolumeClaimFileSystemResizePending: true,
		corev1.PersistentVolumeClaimControllerResizeError:   true,
		corev1.PersistentVolumeClaimNodeResizeError:         true,
		corev1.PersistentVolumeClaimVolumeModifyingVolume:   false,
	} {
		pvc := &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{
			Conditions: []corev1.PersistentVolumeClaimCondition{{Type: typ, Status: corev1.ConditionTrue}}}}
		if got := Resizing(pvc); got != want {
			t.Errorf("condition %s: resizing %v, want %v", typ, got, want)
		}
	}
	if Resizing(&corev1.PersistentVolumeClaim{}) {
		t.Error("a claim without conditions is resizing")
	}
}
