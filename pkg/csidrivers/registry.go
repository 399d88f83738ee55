// Package csidrivers is a node's registry of CSI drivers, the kubelet's CSI plugin
// registration handler (csi_plugin.go's RegistrationHandler): a driver that registers
// through the plugin registry directory is dialed once, asked NodeGetInfo and its node
// capabilities, and published on the Node and the CSINode (pkg/csinode); the connection is
// shared by every node call of the CSI volume plugin and replaced, with its capabilities
// read again, when the driver registers again. A driver whose registration socket goes away
// is removed from the Node and the CSINode.
//
// A Registry is the Drivers of the CSI volume plugin (pkg/volume/plugins/csi) and the
// Handler of a pluginregistration.Watcher; Watch runs that watcher.
package csidrivers

import (
	"context"
	"fmt"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/pkg/csinode"
	"github.com/kubevol/kubevol/pkg/pluginregistration"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
)

// Registry holds one connection per registered CSI driver. It is safe for concurrent use.
type Registry struct {
	nodes csinode.Manager

	mu    sync.Mutex
	conns map[string]*csiclient.Conn
	// drivers is what each registered driver published, for the allocatable refresh.
	drivers map[string]csinode.Driver
	// clock ticks RunAllocatableUpdates, which measures the periods in its ticks.
	clock clock.WithTicker
}

var (
	_ pluginregistration.Handler = (*Registry)(nil)
	_ csiplugin.Drivers          = (*Registry)(nil)
)

// New returns an empty registry for the node nodeName. client writes that Node's CSI
// annotation and topology labels and its CSINode; the Node must exist when a driver
// registers (a registration refused for a missing Node is retried by the watcher).
func New(client kubernetes.Interface, nodeName string) *Registry {
	return &Registry{nodes: csinode.Manager{Client: client, NodeName: nodeName}, conns: map[string]*csiclient.Conn{},
		drivers: map[string]csinode.Driver{}, clock: clock.RealClock{}}
}

// InitializeCSINode makes the node's CSINode exist before any driver registers, with the
// annotation of the in-tree plugins the node mounts through CSI, as the kubelet does when it
// starts (csinode.Manager.Initialize).
func (r *Registry) InitializeCSINode(ctx context.Context) error {
	return r.nodes.Initialize(ctx)
}

// Watch registers the drivers whose registration sockets appear in dir (usually
// volume.Paths.PluginRegistryDir, <root-dir>/plugins_registry) until ctx ends, then closes
// every driver connection.
func (r *Registry) Watch(ctx context.Context, dir string) error {
	defer r.Close()
	w := &pluginregistration.Watcher{Dir: dir, Handler: r}
	return w.Run(ctx)
}

// RegisterPlugin implements pluginregistration.Handler.
func (r *Registry) RegisterPlugin(ctx context.Context, name, endpoint string, _ []string) error {
	logger := klog.FromContext(ctx).WithValues("driver", name)
	conn, err := csiclient.Dial(csiclient.Config{Address: endpoint})
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
	if err := r.nodes.Install(ctx, drv); err != nil {
		_ = conn.Close()
		return err
	}
	r.mu.Lock()
	old := r.conns[name]
	r.conns[name] = conn
	r.drivers[name] = drv
	r.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	logger.Info("CSI driver registered", "endpoint", endpoint, "nodeID", drv.NodeID, "topology", drv.Topology, "maxVolumes", drv.MaxVolumes)
	return nil
}

// DeregisterPlugin implements pluginregistration.Handler.
func (r *Registry) DeregisterPlugin(ctx context.Context, name string) {
	logger := klog.FromContext(ctx).WithValues("driver", name)
	r.mu.Lock()
	conn := r.conns[name]
	delete(r.conns, name)
	delete(r.drivers, name)
	r.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
	if err := r.nodes.Uninstall(ctx, name); err != nil {
		logger.Error(err, "Cannot remove the CSI driver from the Node and CSINode")
		return
	}
	logger.Info("CSI driver deregistered")
}

// Node implements the CSI volume plugin's Drivers: the registered driver's node client
// and its node capabilities.
func (r *Registry) Node(ctx context.Context, name string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	r.mu.Lock()
	conn := r.conns[name]
	r.mu.Unlock()
	if conn == nil {
		return nil, nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	caps, err := conn.NodeCapabilities(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn.Node, caps, nil
}

// Close closes every driver connection and forgets the drivers, leaving the Node and the
// CSINode as they are (a restarted node finds its drivers registered again). Watch calls it
// when it returns.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, c := range r.conns {
		_ = c.Close()
		delete(r.conns, name)
	}
}
