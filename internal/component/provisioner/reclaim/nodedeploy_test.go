package reclaim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAccessibleFrom(t *testing.T) {
	pv := func(values ...string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: values}}}},
		}}}}
	}
	here := map[string]string{"zone": "a"}
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		seg  map[string]string
		want bool
	}{
		{"this node's volume", pv("a"), here, true},
		{"another node's volume", pv("b"), here, false},
		{"central provisioner", pv("b"), nil, true},
		{"no affinity", &corev1.PersistentVolume{}, here, true},
	} {
		if got := accessibleFrom(tc.pv, tc.seg); got != tc.want {
			t.Errorf("%s: accessible = %v, want %v", tc.name, got, tc.want)
		}
	}
}
