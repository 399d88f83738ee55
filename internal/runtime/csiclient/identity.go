package csiclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Capabilities are the plugin and controller capabilities a driver announced.
type Capabilities struct {
	Plugin     map[csi.PluginCapability_Service_Type]bool
	Controller map[csi.ControllerServiceCapability_RPC_Type]bool
}

// ProbeForever calls Probe every second until the driver says it is ready, as upstream
// sidecars do at startup. Unavailable, DeadlineExceeded and ready=false are waited out; any
// other error is returned.
func (c *Conn) ProbeForever(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		cctx, cancel := c.WithTimeout(ctx)
		defer cancel()
		rsp, err := c.Identity.Probe(cctx, &csi.ProbeRequest{})
		if err != nil {
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				logger.V(2).Info("Waiting for the CSI driver", "err", err)
				return false, nil
			}
			return false, fmt.Errorf("csi: probe: %w", err)
		}
		if r := rsp.GetReady(); r != nil && !r.GetValue() {
			logger.V(2).Info("CSI driver is not ready yet")
			return false, nil
		}
		return true, nil
	})
}

// DriverName returns the driver's name from GetPluginInfo, cached after the first success.
// It also labels this connection's metrics with it.
func (c *Conn) DriverName(ctx context.Context) (string, error) {
	c.mu.Lock()
	name := c.driver
	c.mu.Unlock()
	if name != "" {
		return name, nil
	}
	cctx, cancel := c.WithTimeout(ctx)
	defer cancel()
	rsp, err := c.Identity.GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("csi: GetPluginInfo: %w", err)
	}
	if rsp.GetName() == "" {
		return "", errors.New("csi: GetPluginInfo returned an empty driver name")
	}
	c.mu.Lock()
	c.driver = rsp.GetName()
	c.mu.Unlock()
	return rsp.GetName(), nil
}

// Capabilities returns the plugin and controller capabilities, fetched once and cached: a
// driver's capabilities do not change while it runs. The controller service is asked only
// when the plugin announces it.
func (c *Conn) Capabilities(ctx context.Context) (*Capabilities, error) {
	c.mu.Lock()
	caps := c.caps
	c.mu.Unlock()
	if caps != nil {
		return caps, nil
	}
	caps = &Capabilities{
		Plugin:     map[csi.PluginCapability_Service_Type]bool{},
		Controller: map[csi.ControllerServiceCapability_RPC_Type]bool{},
	}
	cctx, cancel := c.WithTimeout(ctx)
	defer cancel()
	prsp, err := c.Identity.GetPluginCapabilities(cctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return nil, fmt.Errorf("csi: GetPluginCapabilities: %w", err)
	}
	for _, pc := range prsp.GetCapabilities() {
		if s := pc.GetService(); s != nil {
			caps.Plugin[s.GetType()] = true
		}
	}
	if caps.Plugin[csi.PluginCapability_Service_CONTROLLER_SERVICE] {
		crsp, err := c.Controller.ControllerGetCapabilities(cctx, &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			return nil, fmt.Errorf("csi: ControllerGetCapabilities: %w", err)
		}
		for _, cc := range crsp.GetCapabilities() {
			if r := cc.GetRpc(); r != nil {
				caps.Controller[r.GetType()] = true
			}
		}
	}
	c.mu.Lock()
	c.caps = caps
	c.mu.Unlock()
	return caps, nil
}

// NodeCapabilities returns the node service capabilities, cached after the first success.
func (c *Conn) NodeCapabilities(ctx context.Context) (map[csi.NodeServiceCapability_RPC_Type]bool, error) {
	c.mu.Lock()
	caps := c.nodeCaps
	c.mu.Unlock()
	if caps != nil {
		return caps, nil
	}
	cctx, cancel := c.WithTimeout(ctx)
	defer cancel()
	rsp, err := c.Node.NodeGetCapabilities(cctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return nil, fmt.Errorf("csi: NodeGetCapabilities: %w", err)
	}
	caps = map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, nc := range rsp.GetCapabilities() {
		if r := nc.GetRpc(); r != nil {
			caps[r.GetType()] = true
		}
	}
	c.mu.Lock()
	c.nodeCaps = caps
	c.mu.Unlock()
	return caps, nil
}
