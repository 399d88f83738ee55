package up

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/pluginregistration"
)

// NodePlaceholder in a --driver endpoint stands for a node's name: up then expects one node
// instance of the driver per node, at the endpoint with the node's name put in
// (unix:///run/mydriver/{node}.sock), as a DaemonSet runs one driver pod per node. The first
// node's instance also serves the controller side the sidecars call.
const NodePlaceholder = "{node}"

// probeDriverNodes probes a --driver endpoint: without NodePlaceholder one instance, on the
// first node; with it one per node, each of which must serve the same driver under a node ID
// of its own. Errors are *DriverError.
func probeDriverNodes(ctx context.Context, endpoint string, nodes []NodeInfo) (*externalDriver, error) {
	if !strings.Contains(endpoint, NodePlaceholder) {
		d, err := probeDriver(ctx, endpoint)
		if err == nil {
			d.kubeNode = nodes[0].Name
		}
		return d, err
	}
	var d *externalDriver
	fail := func(err error) (*externalDriver, error) {
		if d != nil {
			closeDrivers([]*externalDriver{d})
		}
		return nil, err
	}
	ids := map[string]string{}
	for i, n := range nodes {
		inst, err := probeInstance(ctx, strings.ReplaceAll(endpoint, NodePlaceholder, n.Name), i == 0)
		if err != nil {
			return fail(err)
		}
		inst.kubeNode, inst.registry = n.Name, registryOf(n)
		if i == 0 {
			d = inst
			d.registry = ""
		} else {
			d.nodeInstances = append(d.nodeInstances, inst)
		}
		if inst.name != d.name {
			return fail(&DriverError{Endpoint: inst.endpoint, Err: fmt.Errorf("serves driver %q; node %s's instance serves %q: every node instance must be the same driver", inst.name, nodes[0].Name, d.name)})
		}
		if other, dup := ids[inst.nodeID]; dup {
			return fail(&DriverError{Endpoint: inst.endpoint, Err: fmt.Errorf("NodeGetInfo returned node ID %q, as node %s's instance did: each node instance needs its own", inst.nodeID, other)})
		}
		ids[inst.nodeID] = n.Name
	}
	return d, nil
}

// registryOf is a node agent's plugin registry.
func registryOf(n NodeInfo) string { return filepath.Join(n.RootDir, "plugins_registry") }

// register registers one instance of a driver with its node's agent, as node-driver-registrar
// does, unless it registers itself there, and waits for the node's CSINode to list it.
func (s *Stack) register(ctx context.Context, cs kubernetes.Interface, d *externalDriver, regDir string) error {
	if sock := registeredBy(ctx, regDir, d.name); sock != "" {
		d.selfRegistered = true
		fmt.Fprintf(s.opts.Progress, "%s registers itself on node %s (%s)\n", d.name, d.kubeNode, sock)
	} else {
		log := "kubevol-" + d.name + "-registrar"
		if d.kubeNode != s.opts.NodeName {
			log += "-" + d.kubeNode
		}
		rctx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), s.fileLogger(log)))
		d.regCancel, d.regDone = cancel, make(chan struct{})
		reg := &pluginregistration.Registrar{Dir: regDir, Driver: d.name, Endpoint: d.socket}
		go func() {
			defer close(d.regDone)
			if err := reg.Serve(rctx); err != nil {
				s.report(fmt.Sprintf("%s on node %s: plugin registration stopped: %v", d.name, d.kubeNode, err))
			}
		}()
	}
	if err := waitRegistered(ctx, cs, d.kubeNode, d.name); err != nil {
		return fmt.Errorf("driver %s (%s) did not register with the node agent of %s: %w; see its log under %s", d.name, d.endpoint, d.kubeNode, err, s.Cluster.LogPath("kubevol-node"))
	}
	return nil
}
