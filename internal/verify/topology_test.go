package verify

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

const segKey = "topology.example.com/zone"

// topologyNode is a Node in segment zone with the driver (or another one) on its CSINode.
func topologyNode(name, zone, driver string) []runtime.Object {
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{segKey: zone}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: driver, NodeID: name, TopologyKeys: []string{segKey}}}}},
	}
}

func TestOtherSegmentNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects [][]runtime.Object
		want    string // the node, or the start of the reason it does not apply
	}{
		{"one node", [][]runtime.Object{topologyNode("a", "za", "d.example.com")}, "the driver is registered on one node only"},
		{"other node without the driver", [][]runtime.Object{topologyNode("a", "za", "d.example.com"), topologyNode("b", "zb", "other.example.com")},
			"the driver is registered on one node only"},
		{"one segment", [][]runtime.Object{topologyNode("a", "za", "d.example.com"), topologyNode("b", "za", "d.example.com")}, "every node of the driver is in the segment"},
		{"two segments", [][]runtime.Object{topologyNode("a", "za", "d.example.com"), topologyNode("b", "za", "d.example.com"), topologyNode("c", "zc", "d.example.com")}, "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, o := range tc.objects {
				objs = append(objs, o...)
			}
			k := &caseEnv{env: &env{cs: fake.NewClientset(objs...), driver: "d.example.com", node: "a", topology: map[string]string{segKey: "za"}}, ctx: context.Background()}
			got, err := k.otherSegmentNode()
			var na notApplicable
			switch {
			case errors.As(err, &na):
				if !strings.HasPrefix(na.reason, tc.want) {
					t.Errorf("not applicable: %q, want %q", na.reason, tc.want)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Errorf("got node %q, want %q", got, tc.want)
			}
		})
	}
}
