package up

import (
	"fmt"
	"strconv"
	"strings"
)

// NodeInfo is one node of the stack: its Node name, which is also the built-in driver's node
// ID and topology segment, and where its node agent and driver node instance keep their state.
type NodeInfo struct {
	Name string
	// RootDir is the node agent's --root-dir (pods/<uid>/volumes/..., plugins_registry).
	RootDir string
	// DriverStateDir is the built-in driver's --state-dir on this node.
	DriverStateDir string

	kubeconfig string // the node agent's own credential, written at its bootstrap
	socket     string // the driver node instance's CSI endpoint (unix://)
	component  string // the node agent's component name, "kubevol node[-<name>]"
	driver     string // the driver node instance's component name
}

// Nodes are the stack's nodes, the first one first: its paths, names and driver process
// are those of a one-node stack, so --nodes 1 is today's layout.
func (s *Stack) Nodes() []NodeInfo {
	n := max(s.opts.Nodes, 1)
	out := make([]NodeInfo, n)
	for i := range out {
		if i == 0 {
			out[i] = NodeInfo{Name: s.opts.NodeName, RootDir: s.path("node"), DriverStateDir: s.path("driver"),
				kubeconfig: s.path("node.kubeconfig"), socket: "unix://" + s.path("csi", "csi.sock"), component: "node", driver: "driver"}
			continue
		}
		name := s.opts.NodeName + "-" + strconv.Itoa(i+1)
		out[i] = NodeInfo{Name: name, RootDir: s.path("nodes", name, "node"), DriverStateDir: s.path("nodes", name, "driver"),
			kubeconfig: s.path("nodes", name, "node.kubeconfig"), socket: "unix://" + s.path("csi", name+".sock"),
			component: "node-" + name, driver: "driver-" + name}
	}
	return out
}

// step is one kubevol component of startComponents: its name after "kubevol ", its health
// port and arguments.
type step struct {
	name string
	port int
	args []string
}

// driverSteps are the built-in driver's processes: on the first node one serving both
// sides, as on a one-node stack; on several nodes, its controller also provisions in every
// other node's segment, and each other node has a node instance over the controller's
// volumes. Each registers with its own node agent.
func (s *Stack) driverSteps(nodes []NodeInfo, ports []int) []step {
	// The node agent learns of the driver as the kubelet would, through its registry.
	first := s.driverArgs("all", nodes[0], "--plugin-registration-dir", registryOf(nodes[0]))
	if len(nodes) > 1 {
		var others []string
		for _, n := range nodes[1:] {
			others = append(others, n.Name)
		}
		first = append(first, "--topology-nodes", strings.Join(others, ","))
	}
	steps := []step{{"driver", ports[0], first}}
	for i, n := range nodes[1:] {
		steps = append(steps, step{n.driver, ports[1+i],
			s.driverArgs("node", n, "--plugin-registration-dir", registryOf(n), "--controller-state-dir", nodes[0].DriverStateDir)})
	}
	return steps
}

func (s *Stack) driverArgs(mode string, n NodeInfo, extra ...string) []string {
	args := append([]string{"driver", "--endpoint", n.socket, "--node-id", n.Name, "--state-dir", n.DriverStateDir, "--mode", mode}, extra...)
	if s.opts.CallLog != "" {
		args = append(args, "--call-log", s.opts.CallLog)
	}
	if s.opts.AttachRequired {
		args = append(args, "--attach-required")
	}
	return args
}

// nodeSteps are the node agents, each its own Node with its own client certificate, obtained
// through a CSR that kube-controller-manager approves for the bootstrap token (docs/node.md).
func (s *Stack) nodeSteps(nodes []NodeInfo, bootstrap string, ports []int) []step {
	var out []step
	for i, n := range nodes {
		out = append(out, step{n.component, ports[i], []string{"node", "--kubeconfig", n.kubeconfig, "--bootstrap-kubeconfig", bootstrap,
			"--node-name", n.Name, "--root-dir", n.RootDir,
			// Only kubevol uses this node: it takes the cluster's pods, untainted.
			"--register-with-taints=", "--sync-frequency", s.opts.NodeSyncFrequency.String()}})
	}
	return out
}

func validateNodes(o Options) error {
	switch {
	case o.Nodes < 0:
		return fmt.Errorf("up: --nodes must be at least 1, got %d", o.Nodes)
	case o.Nodes > 1 && o.Runtime != "":
		return fmt.Errorf("up: --nodes %d needs the kubevol node agent; --runtime %s runs one kubelet", o.Nodes, o.Runtime)
	}
	return nil
}
