package verify

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestDetachedFirst: the move case fails when the attachment to the new node appears while
// the old one still exists, or never appears.
func TestDetachedFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []attachEvent
		fail   string
	}{
		{"ordered", []attachEvent{{"a", true}, {"b", false}}, ""},
		{"attached before the detach", []attachEvent{{"b", false}, {"a", true}}, "while the one to node a still existed"},
		{"never attached", []attachEvent{{"a", true}}, "no VolumeAttachment to node b"},
	} {
		err := detachedFirst(tc.events, "a", "b")
		if (err == nil) != (tc.fail == "") || err != nil && !strings.Contains(err.Error(), tc.fail) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.fail)
		}
	}
}

// TestReachableFrom: a PV whose node affinity excludes the node makes the several-node
// cases not applicable; one without affinity, or one that selects the node, does not.
func TestReachableFrom(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{segKey: "zb"}}}
	k := &caseEnv{env: &env{cs: fake.NewClientset(node)}, ctx: context.Background()}
	affinity := func(zone string) *corev1.VolumeNodeAffinity {
		return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: segKey, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}}}}}}
	}
	for _, tc := range []struct {
		name     string
		affinity *corev1.VolumeNodeAffinity
		applies  bool
	}{{"network", nil, true}, {"same segment", affinity("zb"), true}, {"local elsewhere", affinity("za"), false}} {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: corev1.PersistentVolumeSpec{NodeAffinity: tc.affinity}}
		err := k.reachableFrom(pv, "b")
		var na notApplicable
		if got := !errors.As(err, &na); got != tc.applies || (err != nil && !errors.As(err, &na)) {
			t.Errorf("%s: %v, want applies=%v", tc.name, err, tc.applies)
		}
	}
}
