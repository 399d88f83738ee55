package kubeletvm

import (
	"context"
	"fmt"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	kcsi "k8s.io/kubernetes/pkg/volume/csi"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
)

// drivers gives kubevol's CSI plugin the drivers the kubelet's plugin watcher registered:
// the kubelet validates each registration and writes the CSINode, so they are looked up,
// not registered a second time. One connection per driver, dialed again when the driver
// registers with another endpoint.
type drivers struct {
	mu    sync.Mutex
	conns map[string]driverConn
}

type driverConn struct {
	endpoint string
	conn     *csiclient.Conn
}

var _ csiplugin.Drivers = (*drivers)(nil)

func newDrivers() *drivers { return &drivers{conns: map[string]driverConn{}} }

func (d *drivers) Node(ctx context.Context, name string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	endpoint, ok := kcsi.RegisteredDriverEndpoint(name)
	if !ok {
		// The kubelet's own words for an unregistered driver.
		return nil, nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	conn, err := d.conn(name, endpoint)
	if err != nil {
		return nil, nil, err
	}
	caps, err := conn.NodeCapabilities(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn.Node, caps, nil
}

func (d *drivers) conn(name, endpoint string) (*csiclient.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[name]; ok && c.endpoint == endpoint {
		return c.conn, nil
	}
	conn, err := csiclient.Dial(csiclient.Config{Address: endpoint})
	if err != nil {
		return nil, fmt.Errorf("driver %s at %s: %w", name, endpoint, err)
	}
	if old, ok := d.conns[name]; ok {
		_ = old.conn.Close()
	}
	d.conns[name] = driverConn{endpoint: endpoint, conn: conn}
	return conn, nil
}

func (d *drivers) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, c := range d.conns {
		_ = c.conn.Close()
		delete(d.conns, name)
	}
}
