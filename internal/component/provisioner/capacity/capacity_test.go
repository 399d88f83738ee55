package capacity

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

const driverName = "fake.csi.kubevol.io"

// One object per segment and late-binding class, labelled as upstream, updated when the
// capacity changes and deleted when its class goes.
func TestCapacityObjectsFollowClassesAndSegments(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	objs := []any{ // created through the client, so that the fake tracker serves watches
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"zone": "b"}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: "n1", TopologyKeys: []string{"zone"}}}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: "n2", TopologyKeys: []string{"zone"}}}}},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Provisioner: driverName, VolumeBindingMode: &wffc},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "immediate"}, Provisioner: driverName},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "other.example.com", VolumeBindingMode: &wffc},
	}
	cs := fake.NewClientset()
	// The fake API server does not implement generateName.
	n := 0
	cs.PrependReactor("create", "csistoragecapacities", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o := a.(k8stesting.CreateAction).GetObject().(*storagev1.CSIStorageCapacity); o.Name == "" {
			n++
			o.Name = fmt.Sprintf("%s%d", o.GenerateName, n)
		}
		return false, nil, nil
	})
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Node:
			_, err = cs.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
		case *storagev1.CSINode:
			_, err = cs.StorageV1().CSINodes().Create(ctx, o, metav1.CreateOptions{})
		case *storagev1.StorageClass:
			_, err = cs.StorageV1().StorageClasses().Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	drv := csitest.Start(t, &csitest.Driver{Name: driverName, Topology: true, Capacity: 1 << 30})
	conn, err := csiclient.Dial(csiclient.Config{Address: drv.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	factory := informers.NewSharedInformerFactory(cs, 0)
	c, err := New(Config{ControllerConfig: sidecar.ControllerConfig{Client: cs, CSI: conn, DriverName: driverName,
		RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: 100 * time.Millisecond}, Topology: true,
		Options: Options{Enabled: true, PollInterval: 100 * time.Millisecond, OwnerrefLevel: -1, Namespace: "kube-system"},
		Classes: factory.Storage().V1().StorageClasses(), Nodes: factory.Core().V1().Nodes(), CSINodes: factory.Storage().V1().CSINodes()})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx)

	objects := func() []storagev1.CSIStorageCapacity {
		l, _ := cs.StorageV1().CSIStorageCapacities("kube-system").List(ctx, metav1.ListOptions{})
		return l.Items
	}
	poll := func(what string, cond func([]storagev1.CSIStorageCapacity) bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(objects()), nil }); err != nil {
			t.Fatalf("timed out waiting for %s; have %+v", what, objects())
		}
	}
	poll("one object per zone for the late-binding class", func(os []storagev1.CSIStorageCapacity) bool {
		zones := map[string]bool{}
		for _, o := range os {
			if o.StorageClassName != "late" || o.Labels[LabelDriverName] != driverName || o.Labels[LabelManagedBy] != ManagedBy || o.Capacity.Value() != 1<<30 {
				return false
			}
			zones[o.NodeTopology.MatchLabels["zone"]] = true
		}
		return len(os) == 2 && zones["a"] && zones["b"]
	})
	drv.SetCapacity(2 << 30) // the next poll sees it
	poll("updated capacity", func(os []storagev1.CSIStorageCapacity) bool {
		return len(os) == 2 && os[0].Capacity.Value() == 2<<30 && os[1].Capacity.Value() == 2<<30
	})
	// A driver whose pool overflowed: nothing negative is published, and no capacity is.
	drv.SetCapacity(-9223372036854771712)
	poll("a negative capacity published as 0", func(os []storagev1.CSIStorageCapacity) bool {
		return len(os) == 2 && os[0].Capacity.Sign() == 0 && os[1].Capacity.Sign() == 0
	})
	if err := cs.StorageV1().StorageClasses().Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the objects of a deleted class to go", func(os []storagev1.CSIStorageCapacity) bool { return len(os) == 0 })
}
