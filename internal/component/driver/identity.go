package driver

import (
	"context"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity serves the CSI Identity service, which every mode serves.
type identity struct {
	csi.UnimplementedIdentityServer
	cfg   *Config
	ready *atomic.Bool
}

func (i *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.cfg.DriverName, VendorVersion: i.cfg.Version}, nil
}

// GetPluginCapabilities describes the plugin as a whole, whichever services this process
// serves: the CO asks the node plugin too whether a controller exists.
func (i *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	expansion := func(t csi.PluginCapability_VolumeExpansion_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: t}}}
	}
	caps := []*csi.PluginCapability{
		service(csi.PluginCapability_Service_CONTROLLER_SERVICE),
		service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
	}
	if !i.cfg.off[WithoutGroupSnapshots] && !i.cfg.off[WithoutSnapshots] {
		caps = append(caps, service(csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE))
	}
	if !i.cfg.off[WithoutPluginExpansion] {
		caps = append(caps, expansion(csi.PluginCapability_VolumeExpansion_ONLINE), expansion(csi.PluginCapability_VolumeExpansion_OFFLINE))
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready once the state has been loaded and reconciled.
func (i *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(i.ready.Load())}, nil
}
