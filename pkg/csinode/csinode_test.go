package csinode

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestInstallAndUninstall(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}})
	m := &Manager{Client: cs, NodeName: "n1"}

	a := Driver{Name: "a.example.com", NodeID: "node-a", Topology: map[string]string{"topology.a/zone": "z1", "topology.a/node": "n1"}, MaxVolumes: 16}
	if err := m.Install(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := m.Install(ctx, Driver{Name: "b.example.com", NodeID: "node-b"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Install(ctx, a); err != nil { // idempotent
		t.Fatal(err)
	}
	node, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if got, want := node.Annotations[NodeIDAnnotation], `{"a.example.com":"node-a","b.example.com":"node-b"}`; got != want {
		t.Errorf("node-id annotation = %s, want %s", got, want)
	}
	if node.Labels["topology.a/zone"] != "z1" || node.Labels["kubernetes.io/hostname"] != "n1" {
		t.Errorf("labels = %v: topology missing or existing labels lost", node.Labels)
	}
	cn, err := cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("CSINode owner = %v, want the Node", cn.OwnerReferences)
	}
	if len(cn.Spec.Drivers) != 2 {
		t.Fatalf("CSINode drivers = %+v, want 2", cn.Spec.Drivers)
	}
	d := cn.Spec.Drivers[0]
	if d.Name != "a.example.com" || d.NodeID != "node-a" || d.Allocatable == nil || *d.Allocatable.Count != 16 ||
		len(d.TopologyKeys) != 2 || d.TopologyKeys[0] != "topology.a/node" {
		t.Errorf("driver a entry = %+v", d)
	}
	if cn.Spec.Drivers[1].Allocatable != nil {
		t.Error("a driver without max_volumes_per_node got an allocatable count")
	}

	if err := m.Uninstall(ctx, "a.example.com"); err != nil {
		t.Fatal(err)
	}
	node, _ = cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if got := node.Annotations[NodeIDAnnotation]; got != `{"b.example.com":"node-b"}` {
		t.Errorf("after uninstall, node-id annotation = %s", got)
	}
	cn, _ = cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if len(cn.Spec.Drivers) != 1 || cn.Spec.Drivers[0].Name != "b.example.com" {
		t.Errorf("after uninstall, CSINode drivers = %+v", cn.Spec.Drivers)
	}
}

func TestTopologyConflictIsRefused(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "east"}}})
	m := &Manager{Client: cs, NodeName: "n1"}
	err := m.Install(ctx, Driver{Name: "a.example.com", NodeID: "x", Topology: map[string]string{"zone": "west"}})
	if err == nil {
		t.Fatal("a driver could overwrite a conflicting topology label")
	}
	if _, err := cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{}); err == nil {
		t.Error("CSINode written despite the refused registration")
	}
}

func TestMissingNode(t *testing.T) {
	m := &Manager{Client: fake.NewClientset(), NodeName: "absent"}
	if err := m.Install(context.Background(), Driver{Name: "a", NodeID: "x"}); err == nil {
		t.Fatal("Install succeeded without a Node object")
	}
}

// The CSINode exists before any driver registers and lists the migrated in-tree plugins, as
// the kubelet writes them; an annotation another writer dropped comes back with the next
// write, and an Initialize that changes nothing writes nothing.
func TestInitializeMigratedPlugins(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}})
	m := &Manager{Client: cs, NodeName: "n1"}
	if err := m.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	want := "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
	cn, err := cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil || cn.Annotations["storage.alpha.kubernetes.io/migrated-plugins"] != want || len(cn.Spec.Drivers) != 0 {
		t.Fatalf("CSINode after Initialize: %+v, %v", cn, err)
	}
	writes := len(cs.Actions())
	if err := m.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range cs.Actions()[writes:] {
		if a.GetVerb() != "get" {
			t.Errorf("a second Initialize wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	cn.Annotations = nil
	if _, err := cs.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Install(ctx, Driver{Name: "ebs.csi.aws.com", NodeID: "i-1"}); err != nil {
		t.Fatal(err)
	}
	cn, _ = cs.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if cn.Annotations["storage.alpha.kubernetes.io/migrated-plugins"] != want {
		t.Errorf("annotation after Install: %v", cn.Annotations)
	}
}

// The node's write names only the labels and annotations it changes and the version it
// read: taints the node controller changed meanwhile are neither sent nor reverted.
func TestMetaPatchCarriesNoSpec(t *testing.T) {
	a := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7",
		Labels: map[string]string{"keep": "1", "gone": "1"}, Annotations: map[string]string{"x": "1"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}}}
	b := a.DeepCopy()
	delete(b.Labels, "gone")
	b.Labels["new"] = "2"
	b.Annotations[NodeIDAnnotation] = `{"a.example.com":"node-a"}`
	b.Spec.Taints = nil
	got, err := metaPatch(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"csi.volume.kubernetes.io/nodeid":"{\"a.example.com\":\"node-a\"}"},"labels":{"gone":null,"new":"2"},"resourceVersion":"7"}}`
	if string(got) != want {
		t.Errorf("patch\n%s\nwant\n%s", got, want)
	}
}
