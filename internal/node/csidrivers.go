package node

import (
	"context"
	"fmt"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csi"
	"github.com/kubevol/kubevol/internal/csinode"
)

// csiDrivers is the node's registry of CSI drivers, the kubelet's csi_plugin
// RegistrationHandler: a driver that registers through plugins_registry is dialed once,
// asked NodeGetInfo, and published on the Node and CSINode; the connection is reused for
// every node call and replaced (capabilities refreshed) when the driver registers again.
type csiDrivers struct {
	nodes csinode.Manager

	mu    sync.Mutex
	conns map[string]*csi.Conn
}

func newCSIDrivers(client kubernetes.Interface, nodeName string) *csiDrivers {
	return &csiDrivers{nodes: csinode.Manager{Client: client, NodeName: nodeName}, conns: map[string]*csi.Conn{}}
}

// RegisterPlugin implements registration.Handler.
func (d *csiDrivers) RegisterPlugin(ctx context.Context, name, endpoint string, _ []string) error {
	logger := klog.FromContext(ctx).WithValues("driver", name)
	conn, err := csi.Dial(csi.Config{Address: endpoint})
	if err != nil {
		return err
	}
	cctx, cancel := conn.WithTimeout(ctx)
	defer cancel()
	info, err := conn.Node.NodeGetInfo(cctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("NodeGetInfo of driver %s: %w", name, err)
	}
	if info.GetNodeId() == "" {
		_ = conn.Close()
		return fmt.Errorf("driver %s returned an empty node ID", name)
	}
	// Capabilities are read now, so a new registration refreshes them and a driver that
	// cannot answer is refused rather than failing every mount later.
	if _, err := conn.NodeCapabilities(ctx); err != nil {
		_ = conn.Close()
		return err
	}
	drv := csinode.Driver{Name: name, NodeID: info.GetNodeId(), MaxVolumes: info.GetMaxVolumesPerNode()}
	if t := info.GetAccessibleTopology(); t != nil {
		drv.Topology = t.GetSegments()
	}
	if err := d.nodes.Install(ctx, drv); err != nil {
		_ = conn.Close()
		return err
	}
	d.mu.Lock()
	old := d.conns[name]
	d.conns[name] = conn
	d.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	logger.Info("CSI driver registered", "endpoint", endpoint, "nodeID", drv.NodeID, "topology", drv.Topology, "maxVolumes", drv.MaxVolumes)
	return nil
}

// DeregisterPlugin implements registration.Handler.
func (d *csiDrivers) DeregisterPlugin(ctx context.Context, name string) {
	logger := klog.FromContext(ctx).WithValues("driver", name)
	d.mu.Lock()
	conn := d.conns[name]
	delete(d.conns, name)
	d.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
	if err := d.nodes.Uninstall(ctx, name); err != nil {
		logger.Error(err, "Cannot remove the CSI driver from the Node and CSINode")
		return
	}
	logger.Info("CSI driver deregistered")
}

// Node implements the CSI volume plugin's Drivers: the registered driver's node client
// and its node capabilities.
func (d *csiDrivers) Node(ctx context.Context, name string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	d.mu.Lock()
	conn := d.conns[name]
	d.mu.Unlock()
	if conn == nil {
		return nil, nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	caps, err := conn.NodeCapabilities(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn.Node, caps, nil
}

func (d *csiDrivers) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, c := range d.conns {
		_ = c.Close()
		delete(d.conns, name)
	}
}
