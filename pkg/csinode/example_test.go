package csinode_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/pkg/csinode"
)

// Install publishes what a driver's NodeGetInfo said on the Node and its CSINode.
func ExampleManager_Install() {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	m := &csinode.Manager{Client: client, NodeName: "node-1"}
	err := m.Install(ctx, csinode.Driver{
		Name: "hostpath.csi.example.com", NodeID: "node-1-id", MaxVolumes: 64,
		Topology: map[string]string{"topology.hostpath.csi/node": "node-1"},
	})
	if err != nil {
		panic(err)
	}
	node, _ := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	cn, _ := client.StorageV1().CSINodes().Get(ctx, "node-1", metav1.GetOptions{})
	d := cn.Spec.Drivers[0]
	fmt.Println(node.Annotations[csinode.NodeIDAnnotation])
	fmt.Println(node.Labels["topology.hostpath.csi/node"])
	fmt.Println(d.Name, d.NodeID, d.TopologyKeys, *d.Allocatable.Count)
	// Output:
	// {"hostpath.csi.example.com":"node-1-id"}
	// node-1
	// hostpath.csi.example.com node-1-id [topology.hostpath.csi/node] 64
}
