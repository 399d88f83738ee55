// Package csiclient is kubevol's CSI client, shared by the provisioner, the attacher and the node
// agent: one gRPC connection that reconnects by itself, per-call timeouts, request logging
// with secrets stripped, the csi_sidecar_operations_seconds metric, and a cache of the
// driver's identity and capabilities.
package csiclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// Config says how to reach a CSI driver.
type Config struct {
	// Address is the CSI endpoint: unix:///path, or a bare path (as --csi-address accepts).
	Address string
	// Timeout bounds each call made through WithTimeout (upstream --timeout, default 10 s).
	Timeout time.Duration
	// Metrics receives csi_sidecar_operations_seconds; nil records nothing.
	Metrics *Metrics
}

// Conn is a connection to one CSI driver. It is safe for concurrent use. When the socket
// goes away, gRPC reconnects with a backoff capped at 1 s and calls fail with Unavailable
// meanwhile; callers treat that as "retry later", never as a final answer.
type Conn struct {
	cc         *grpc.ClientConn
	timeout    time.Duration
	metrics    *Metrics
	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient
	// Group is the GroupController service (group snapshots), for drivers that serve it.
	Group csi.GroupControllerClient

	mu       sync.Mutex
	driver   string
	caps     *Capabilities
	nodeCaps map[csi.NodeServiceCapability_RPC_Type]bool
}

// Dial prepares a connection; like grpc.NewClient it does not wait for the driver. Use
// ProbeForever to wait until the driver is ready.
func Dial(cfg Config) (*Conn, error) {
	target, err := Target(cfg.Address)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	c := &Conn{timeout: cfg.Timeout, metrics: cfg.Metrics}
	cc, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Upstream sidecars reconnect every second; a local socket needs no longer backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithChainUnaryInterceptor(c.metricsInterceptor, logInterceptor),
	)
	if err != nil {
		return nil, fmt.Errorf("csi: connect to %s: %w", cfg.Address, err)
	}
	c.cc = cc
	c.Identity = csi.NewIdentityClient(cc)
	c.Controller = csi.NewControllerClient(cc)
	c.Node = csi.NewNodeClient(cc)
	c.Group = csi.NewGroupControllerClient(cc)
	return c, nil
}

// Target turns a --csi-address value into a gRPC target.
func Target(address string) (string, error) {
	switch {
	case address == "":
		return "", errors.New("csi: empty address")
	case strings.HasPrefix(address, "unix://"):
		return address, nil
	case strings.HasPrefix(address, "unix:"):
		return "unix://" + strings.TrimPrefix(address, "unix:"), nil
	case strings.HasPrefix(address, "/"):
		return "unix://" + address, nil
	case strings.Contains(address, "://"):
		return "", fmt.Errorf("csi: unsupported address %q: only unix sockets are supported", address)
	default:
		return "unix://" + address, nil // a relative path, as upstream accepts
	}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.cc.Close() }

// Timeout is the per-call timeout.
func (c *Conn) Timeout() time.Duration { return c.timeout }

// WithTimeout returns a context for one CSI call.
func (c *Conn) WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}
