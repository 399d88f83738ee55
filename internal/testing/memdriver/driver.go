// Package memdriver is an in-memory CSI controller for unit tests and benchmarks: it creates
// and deletes volumes idempotently by name, as a real driver must, and lets a caller inject
// errors and delays per call. It does not import testing, so `kubevol bench provision` can
// link it; internal/testing/csitest adds the test helpers.
package memdriver

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Driver is a fake CSI driver serving Identity and Controller on a unix socket.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer

	Name string
	// ControllerCaps are announced by ControllerGetCapabilities; CREATE_DELETE_VOLUME by default.
	ControllerCaps []csi.ControllerServiceCapability_RPC_Type
	// Topology enables VOLUME_ACCESSIBILITY_CONSTRAINTS; created volumes are accessible from
	// the first preferred (else requisite) segment.
	Topology bool
	// Capacity is what GetCapacity returns.
	Capacity int64
	// OnlineExpansion announces the VolumeExpansion ONLINE plugin capability.
	OnlineExpansion bool

	mu      sync.Mutex
	volumes map[string]*csi.Volume // by name
	calls   map[string]int
	hooks   map[string]func(req any) error
	Address string
}

// Server is what a Driver is served as: the Driver itself, or a test's type that embeds it
// to add the calls it lacks (ControllerPublishVolume, ControllerExpandVolume, ...).
type Server interface {
	csi.IdentityServer
	csi.ControllerServer
}

// Serve serves the driver on the unix socket path until stop is called. Besides tests, the
// provisioning benchmark uses it as a driver whose CreateVolume costs nothing.
func (d *Driver) Serve(sock string) (stop func(), err error) {
	return d.ServeAs(sock, d)
}

// ServeAs is Serve with s, which embeds d, answering the calls in d's place.
func (d *Driver) ServeAs(sock string, s Server) (stop func(), err error) {
	if d.Name == "" {
		d.Name = "fake.csi.kubevol.io"
	}
	if d.ControllerCaps == nil {
		d.ControllerCaps = []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}
	}
	d.volumes = map[string]*csi.Volume{}
	d.calls = map[string]int{}
	d.hooks = map[string]func(any) error{}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, s)
	csi.RegisterControllerServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	d.Address = "unix://" + sock
	return srv.Stop, nil
}

// Hook makes every call of method (e.g. "CreateVolume") run f first; a non-nil error from f
// is returned to the caller instead of doing the work. f may block to simulate a slow call.
func (d *Driver) Hook(method string, f func(req any) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hooks[method] = f
}

// Calls returns how often method was called.
func (d *Driver) Calls(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

// Volumes returns the names of the existing volumes, sorted.
func (d *Driver) Volumes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.volumes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (d *Driver) enter(method string, req any) error {
	d.mu.Lock()
	d.calls[method]++
	h := d.hooks[method]
	d.mu.Unlock()
	if h != nil {
		return h(req)
	}
	return nil
}

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.Name, VendorVersion: "test"}, nil
}

func (d *Driver) Probe(_ context.Context, req *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if err := d.enter("Probe", req); err != nil {
		return nil, err
	}
	return &csi.ProbeResponse{}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []*csi.PluginCapability{svc(csi.PluginCapability_Service_CONTROLLER_SERVICE)}
	if d.Topology {
		caps = append(caps, svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	if d.OnlineExpansion {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func svc(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
	return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
}

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rsp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range d.ControllerCaps {
		rsp.Capabilities = append(rsp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return rsp, nil
}

func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if err := d.enter("CreateVolume", req); err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	for k := range req.GetParameters() {
		if strings.HasPrefix(k, "invalid") {
			return nil, status.Errorf(codes.InvalidArgument, "unknown parameter %q", k)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.volumes[req.GetName()]; ok {
		if v.CapacityBytes < req.GetCapacityRange().GetRequiredBytes() {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with a smaller size", req.GetName())
		}
		return &csi.CreateVolumeResponse{Volume: v}, nil
	}
	v := &csi.Volume{
		VolumeId:      "id-" + req.GetName(),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
		VolumeContext: map[string]string{"name": req.GetName()},
		ContentSource: req.GetVolumeContentSource(),
	}
	if d.Topology {
		if p := req.GetAccessibilityRequirements().GetPreferred(); len(p) > 0 {
			v.AccessibleTopology = []*csi.Topology{p[0]}
		} else if r := req.GetAccessibilityRequirements().GetRequisite(); len(r) > 0 {
			v.AccessibleTopology = []*csi.Topology{r[0]}
		}
	}
	d.volumes[req.GetName()] = v
	return &csi.CreateVolumeResponse{Volume: v}, nil
}

func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := d.enter("DeleteVolume", req); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.volumes, strings.TrimPrefix(req.GetVolumeId(), "id-"))
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *Driver) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if err := d.enter("GetCapacity", req); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return &csi.GetCapacityResponse{AvailableCapacity: d.Capacity}, nil
}

// SetCapacity changes what GetCapacity returns while the driver serves.
func (d *Driver) SetCapacity(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Capacity = n
}

// String describes the driver for test failure messages.
func (d *Driver) String() string { return fmt.Sprintf("fake CSI driver %s at %s", d.Name, d.Address) }
