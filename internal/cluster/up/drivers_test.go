package up

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeDriver answers the identity and node calls up makes when it meets a driver.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
	name   string
	nodeID string
	ctrl   []csi.ControllerServiceCapability_RPC_Type
	node   []csi.NodeServiceCapability_RPC_Type
	// nodeOnly serves no Controller service, as a driver's node instance may not.
	nodeOnly bool
}

func (f *fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: f.name, VendorVersion: "1"}, nil
}

func (f *fakeDriver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (f *fakeDriver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{Type: &csi.PluginCapability_Service_{
		Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}}}}, nil
}

func (f *fakeDriver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rsp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range f.ctrl {
		rsp.Capabilities = append(rsp.Capabilities, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return rsp, nil
}

func (f *fakeDriver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rsp := &csi.NodeGetCapabilitiesResponse{}
	for _, c := range f.node {
		rsp.Capabilities = append(rsp.Capabilities, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}}})
	}
	return rsp, nil
}

func (f *fakeDriver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: f.nodeID}, nil
}

func serveFake(t *testing.T, f *fakeDriver) string {
	t.Helper()
	return serveFakeAt(t, filepath.Join(t.TempDir(), "csi.sock"), f)
}

func serveFakeAt(t *testing.T, sock string, f *fakeDriver) string {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, f)
	if !f.nodeOnly {
		csi.RegisterControllerServer(srv, f)
	}
	csi.RegisterNodeServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func TestProbeDriver(t *testing.T) {
	old := driverWait
	driverWait = 500 * time.Millisecond
	t.Cleanup(func() { driverWait = old })
	ctx := context.Background()

	ep := serveFake(t, &fakeDriver{name: "ext.example.com", nodeID: "n1",
		ctrl: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME},
		node: []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME}})
	d, err := probeDriver(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer d.conn.Close()
	if d.name != "ext.example.com" || d.nodeID != "n1" || !d.hasController() || !d.canExpand() {
		t.Errorf("probed %s node %s controller %v expand %v", d.name, d.nodeID, d.hasController(), d.canExpand())
	}
	spec := d.csiDriverSpec()
	if !*spec.AttachRequired || *spec.StorageCapacity || !*spec.PodInfoOnMount || *spec.FSGroupPolicy != storagev1.FileFSGroupPolicy ||
		len(spec.VolumeLifecycleModes) != 1 || spec.VolumeLifecycleModes[0] != storagev1.VolumeLifecyclePersistent {
		t.Errorf("derived spec %+v", spec)
	}
	no, policy := false, storagev1.NoneFSGroupPolicy
	d.cfg = DriverConfig{AttachRequired: &no, FSGroupPolicy: &policy, VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}}
	spec = d.csiDriverSpec()
	if *spec.AttachRequired || *spec.FSGroupPolicy != policy || spec.VolumeLifecycleModes[0] != storagev1.VolumeLifecycleEphemeral || !*spec.PodInfoOnMount {
		t.Errorf("overridden spec %+v", spec)
	}

	for _, tc := range []struct {
		name, endpoint, want string
	}{
		{"empty name", serveFake(t, &fakeDriver{nodeID: "n1"}), `invalid driver name ""`},
		{"invalid name", serveFake(t, &fakeDriver{name: "Not_A_Name", nodeID: "n1"}), `invalid driver name "Not_A_Name"`},
		{"no node ID", serveFake(t, &fakeDriver{name: "ok.example.com"}), "empty node ID"},
		{"no socket", "unix://" + filepath.Join(t.TempDir(), "none.sock"), "no socket at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := probeDriver(ctx, tc.endpoint)
			var de *DriverError
			if !errors.As(err, &de) {
				t.Fatalf("error %v, want a *DriverError", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.endpoint) || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not name the socket and %q", msg, tc.want)
			}
		})
	}
}

func TestParseDriverConfig(t *testing.T) {
	cfg, err := ParseDriverConfig([]byte("a.example.com:\n  attachRequired: true\n  volumeLifecycleModes: [Persistent, Ephemeral]\n  seLinuxMount: true\n  nodeAllocatableUpdatePeriodSeconds: 10\n  storageClass:\n    volumeBindingMode: Immediate\n    parameters: {type: fast}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg["a.example.com"]
	if a.AttachRequired == nil || !*a.AttachRequired || len(a.VolumeLifecycleModes) != 2 || *a.StorageClass.VolumeBindingMode != storagev1.VolumeBindingImmediate || a.StorageClass.Parameters["type"] != "fast" ||
		a.SELinuxMount == nil || !*a.SELinuxMount || a.NodeAllocatableUpdatePeriodSeconds == nil || *a.NodeAllocatableUpdatePeriodSeconds != 10 {
		t.Errorf("parsed %+v", a)
	}
	if cfg, err := ParseDriverConfig(nil); err != nil || len(cfg) != 0 {
		t.Errorf("empty file: %v, %v", cfg, err)
	}
	for _, bad := range []string{
		"a.example.com:\n  attachRequire: true\n", // misspelt
		"a.example.com:\n  fsGroupPolicy: Sometimes\n",
		"a.example.com:\n  volumeLifecycleModes: [Forever]\n",
		"a.example.com:\n  nodeAllocatableUpdatePeriodSeconds: 5\n", // the API server's minimum is 10
		"a.example.com:\n  storageClass: {volumeBindingMode: Later}\n",
		"Bad_Name:\n  attachRequired: true\n",
		"- a list\n",
	} {
		if _, err := ParseDriverConfig([]byte(bad)); err == nil {
			t.Errorf("ParseDriverConfig(%q) succeeded", bad)
		}
	}
}

func TestCheckDrivers(t *testing.T) {
	if err := checkDrivers([]*externalDriver{{name: "a.example.com"}, {name: "b.example.com"}}); err != nil {
		t.Error(err)
	}
	if err := checkDrivers([]*externalDriver{{name: "a.example.com", endpoint: "unix:///1.sock"}, {name: "a.example.com", endpoint: "unix:///2.sock"}}); err == nil || !strings.Contains(err.Error(), "unix:///2.sock") {
		t.Errorf("duplicate driver: %v", err)
	}
	// One socket given twice, spelt differently: the message says so, not that a name is
	// taken by another driver.
	if err := checkDrivers([]*externalDriver{{name: "a.example.com", endpoint: "unix:///run/a/csi.sock", socket: "/run/a/csi.sock"}, {name: "a.example.com", endpoint: "/run/a/../a/csi.sock", socket: "/run/a/../a/csi.sock"}}); err == nil || !strings.Contains(err.Error(), "--driver /run/a/../a/csi.sock: given twice (also as unix:///run/a/csi.sock)") {
		t.Errorf("one socket twice: %v", err)
	}
	if err := checkDrivers([]*externalDriver{{name: DriverName}}); err == nil {
		t.Error("a driver with the built-in driver's name was accepted")
	}
}

// An override of --driver-config that a CSIDriver from an earlier run contradicts is named,
// since up leaves the object as it is.
func TestInstallDriverObjectsNamesUnappliedConfig(t *testing.T) {
	ctx := context.Background()
	yes := true
	existing := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "ext.example.com"}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &yes, PodInfoOnMount: &yes,
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}
	cs := fake.NewClientset(existing)
	d := &externalDriver{name: "ext.example.com", cfg: DriverConfig{PodInfoOnMount: &yes,
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral, storagev1.VolumeLifecyclePersistent}}}
	if err := d.installDriverObjects(ctx, cs, false); err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.unapplied, ",") != "volumeLifecycleModes" {
		t.Errorf("unapplied = %q, want volumeLifecycleModes only", d.unapplied)
	}
	got, _ := cs.StorageV1().CSIDrivers().Get(ctx, "ext.example.com", metav1.GetOptions{})
	if len(got.Spec.VolumeLifecycleModes) != 1 {
		t.Errorf("the existing CSIDriver was changed: %+v", got.Spec)
	}
	// Created by up: everything applies.
	d2 := &externalDriver{name: "new.example.com", cfg: d.cfg}
	if err := d2.installDriverObjects(ctx, cs, false); err != nil || len(d2.unapplied) > 0 {
		t.Errorf("a created CSIDriver: %v, unapplied %q", err, d2.unapplied)
	}
}
