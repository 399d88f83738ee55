package up

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDriverAndNodeSteps(t *testing.T) {
	s := &Stack{opts: Options{Dir: "/up", NodeName: "n", NodeSyncFrequency: 5 * time.Second}}
	ports := []int{1, 2, 3, 4, 5, 6}
	one := s.Nodes()
	got := s.driverSteps(one, ports)
	// One node: the driver and node agent of a one-node stack, as before --nodes.
	want := "driver --endpoint unix:///up/csi/csi.sock --node-id n --state-dir /up/driver --mode all --plugin-registration-dir /up/node/plugins_registry"
	if len(got) != 1 || got[0].name != "driver" || strings.Join(got[0].args, " ") != want {
		t.Errorf("driver steps of one node: %+v", got)
	}
	nodes := s.nodeSteps(one, "/up/node-bootstrap.kubeconfig", ports)
	want = "node --kubeconfig /up/node.kubeconfig --bootstrap-kubeconfig /up/node-bootstrap.kubeconfig --node-name n --root-dir /up/node --register-with-taints= --sync-frequency 5s"
	if len(nodes) != 1 || nodes[0].name != "node" || strings.Join(nodes[0].args, " ") != want {
		t.Errorf("node steps of one node: %+v", nodes)
	}

	s.opts.Nodes = 3
	three := s.Nodes()
	got = s.driverSteps(three, ports)
	if len(got) != 3 {
		t.Fatalf("driver steps of three nodes: %+v", got)
	}
	if !slices.Contains(got[0].args, "--topology-nodes") || !slices.Contains(got[0].args, "n-2,n-3") || !slices.Contains(got[0].args, "all") {
		t.Errorf("the first node's driver does not serve the others' segments: %v", got[0].args)
	}
	want = "driver --endpoint unix:///up/csi/n-3.sock --node-id n-3 --state-dir /up/nodes/n-3/driver --mode node --plugin-registration-dir /up/nodes/n-3/node/plugins_registry --controller-state-dir /up/driver"
	if got[2].name != "driver-n-3" || strings.Join(got[2].args, " ") != want {
		t.Errorf("the third node's driver: %s %v", got[2].name, got[2].args)
	}
	nodes = s.nodeSteps(three, "/up/b", ports[len(three):])
	seen := map[int]bool{}
	for i, st := range append(got, nodes...) {
		if seen[st.port] {
			t.Errorf("step %d (%s) reuses port %d", i, st.name, st.port)
		}
		seen[st.port] = true
	}
	if nodes[1].name != "node-n-2" || !slices.Contains(nodes[1].args, "/up/nodes/n-2/node") || !slices.Contains(nodes[1].args, "/up/nodes/n-2/node.kubeconfig") {
		t.Errorf("the second node agent: %s %v", nodes[1].name, nodes[1].args)
	}
}
