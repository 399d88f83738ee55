package csidrivers

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

type infoNode struct {
	csi.UnimplementedNodeServer
	id string
}

func (n *infoNode) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.id, MaxVolumesPerNode: 8,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{"topology.example.com/node": "n1"}}}, nil
}

func (n *infoNode) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
	}}}, nil
}

func serveNode(t *testing.T, n csi.NodeServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterNodeServer(srv, n)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return sock
}

// A registered driver is published on the CSINode with NodeGetInfo's answer, its node
// client is served with cached capabilities, a re-registration replaces the connection,
// and deregistration removes it everywhere.
func TestCSIDriverRegistration(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}})
	d := New(cs, "n1")
	defer d.Close()

	if _, _, err := d.Node(ctx, "d.example.com"); err == nil {
		t.Fatal("an unregistered driver has a node client")
	}
	if err := d.RegisterPlugin(ctx, "d.example.com", serveNode(t, &infoNode{id: "id-1"}), []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	cn, err := cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.Spec.Drivers) != 1 || cn.Spec.Drivers[0].NodeID != "id-1" || *cn.Spec.Drivers[0].Allocatable.Count != 8 ||
		cn.Spec.Drivers[0].TopologyKeys[0] != "topology.example.com/node" {
		t.Errorf("CSINode drivers = %+v", cn.Spec.Drivers)
	}
	_, caps, err := d.Node(ctx, "d.example.com")
	if err != nil || !caps[csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		t.Errorf("Node() caps = %v, %v", caps, err)
	}

	if err := d.RegisterPlugin(ctx, "d.example.com", serveNode(t, &infoNode{id: "id-2"}), []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	cn, _ = cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if cn.Spec.Drivers[0].NodeID != "id-2" {
		t.Errorf("re-registration: node ID = %s, want id-2", cn.Spec.Drivers[0].NodeID)
	}

	d.DeregisterPlugin(ctx, "d.example.com")
	cn, _ = cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if len(cn.Spec.Drivers) != 0 {
		t.Errorf("after deregistration CSINode drivers = %+v", cn.Spec.Drivers)
	}
	if _, _, err := d.Node(ctx, "d.example.com"); err == nil {
		t.Error("a deregistered driver still has a node client")
	}
}

// A driver whose node service does not answer is refused, so it retries registration.
func TestCSIDriverRegistrationRefused(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	d := New(cs, "n1")
	defer d.Close()
	if err := d.RegisterPlugin(context.Background(), "d.example.com", serveNode(t, &infoNode{}), []string{"1.0.0"}); err == nil {
		t.Error("a driver with an empty node ID was registered")
	}
}
