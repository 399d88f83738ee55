package provisioner

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/kubevol/kubevol/internal/component/provisioner/capacity"
	"github.com/kubevol/kubevol/internal/component/provisioner/claim"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// nodeInfo asks the node-local driver for its node's topology, as upstream's node
// deployment does at startup; a failure stops the provisioner.
func nodeInfo(ctx context.Context, sc *sidecar.Sidecar, nd *claim.NodeDeployment) error {
	cctx, cancel := sc.CSI.WithTimeout(ctx)
	defer cancel()
	rsp, err := sc.CSI.Node.NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("--node-deployment: NodeGetInfo of the driver on node %s: %w (a node deployment needs the driver's node service on the same socket)", nd.NodeName, err)
	}
	if t := rsp.GetAccessibleTopology(); t != nil && len(t.GetSegments()) > 0 {
		nd.Topology = t.GetSegments()
	}
	return nil
}

// nodeSegment is the single segment a node deployment reports capacity for: its node's
// (or the whole cluster's, an empty segment, when the driver has no topology).
func nodeSegment(nd *claim.NodeDeployment, topology bool) map[string]string {
	switch {
	case nd == nil:
		return nil
	case topology && nd.Topology != nil:
		return nd.Topology
	}
	return map[string]string{}
}

func nodeManagedBy(nd *claim.NodeDeployment) string {
	if nd == nil {
		return ""
	}
	return capacity.NodeManagedBy(nd.NodeName)
}
