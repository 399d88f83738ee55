package topology

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const drv = "d"

func node(name, zone string) (*corev1.Node, *storagev1.CSINode) {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": zone}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: drv, NodeID: name, TopologyKeys: []string{"zone"}}}}}
}

func zones(ts []*csi.Topology) string {
	var z []string
	for _, t := range ts {
		z = append(z, t.Segments["zone"])
	}
	return strings.Join(z, ",")
}

func TestRequirements(t *testing.T) {
	n1, c1 := node("n1", "a")
	n2, c2 := node("n2", "b")
	n3, c3 := node("n3", "c")
	nodes, csiNodes := []*corev1.Node{n1, n2, n3}, []*storagev1.CSINode{c1, c2, c3}
	allowed := []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "zone", Values: []string{"a", "b"}}}}}

	for _, tc := range []struct {
		name      string
		in        Input
		req, pref string
		err       string
		nilReq    bool
	}{
		{name: "late non-strict aggregates, selected first", in: Input{SelectedNode: n2, SelectedCSINode: c2}, req: "a,b,c", pref: "b,c,a"},
		{name: "late strict", in: Input{SelectedNode: n2, SelectedCSINode: c2, Strict: true}, req: "b", pref: "b"},
		{name: "late strict outside allowed", in: Input{SelectedNode: n3, SelectedCSINode: c3, Strict: true, AllowedTopologies: allowed}, err: "not in the StorageClass's allowedTopologies"},
		{name: "late allowed", in: Input{SelectedNode: n2, SelectedCSINode: c2, AllowedTopologies: allowed}, req: "a,b", pref: "b,a"},
		{name: "late no keys", in: Input{SelectedNode: n2, SelectedCSINode: &storagev1.CSINode{}}, err: "no topology key found for node n2"},
		{name: "immediate allowed", in: Input{AllowedTopologies: allowed, ClaimName: "x"}, req: "a,b"},
		{name: "immediate aggregate", in: Input{Immediate: true}, req: "a,b,c"},
		{name: "immediate off", in: Input{}, nilReq: true},
		{name: "immediate nothing registered", in: Input{Immediate: true, CSINodes: []*storagev1.CSINode{{}}}, err: "no available topology found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Driver = drv
			if in.Nodes == nil {
				in.Nodes = nodes
			}
			if in.CSINodes == nil {
				in.CSINodes = csiNodes
			}
			got, err := Requirements(in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.nilReq {
				if got != nil {
					t.Fatalf("want no requirement, got %v", got)
				}
				return
			}
			if zones(got.Requisite) != tc.req {
				t.Errorf("requisite %s, want %s", zones(got.Requisite), tc.req)
			}
			if tc.pref != "" && zones(got.Preferred) != tc.pref {
				t.Errorf("preferred %s, want %s", zones(got.Preferred), tc.pref)
			}
			if len(got.Preferred) != len(got.Requisite) {
				t.Errorf("preferred %v is not a rotation of requisite", got.Preferred)
			}
		})
	}
}

func TestSpreadOffset(t *testing.T) {
	a, b := spreadOffset("data-web-0", 3), spreadOffset("data-web-1", 3)
	if (a+1)%3 != b {
		t.Errorf("ordinals are not spread: %d %d", a, b)
	}
}
