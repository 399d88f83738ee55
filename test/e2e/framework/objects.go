package framework

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/kubecheck"
)

// CreateNode creates the Node and CSINode that the kubelet and node-driver-registrar would
// have made for the kubevol driver named driverName on a node named node, with the driver's
// topology label (driver.TopologyKey=node), so that topology works without a kubelet. Both
// are deleted when the test ends.
func CreateNode(ctx context.Context, t testing.TB, cs kubernetes.Interface, node, driverName string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{driver.TopologyKey: node}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: storagev1.CSINodeSpec{
		Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: node, TopologyKeys: []string{driver.TopologyKey}}}}}
	if _, err := cs.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().CSINodes().Delete(context.Background(), node, metav1.DeleteOptions{})
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
}

// CreateStorageClass creates sc, named "sc-<random>" when it has no name (StorageClasses
// are cluster-wide, so tests sharing the cluster must not collide), and deletes it when the
// test ends.
func CreateStorageClass(ctx context.Context, t testing.TB, cs kubernetes.Interface, sc *storagev1.StorageClass) *storagev1.StorageClass {
	t.Helper()
	if sc.Name == "" {
		sc.Name = "sc-" + strings.ToLower(rand.String(8))
	}
	out, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().StorageClasses().Delete(context.Background(), out.Name, metav1.DeleteOptions{})
	})
	return out
}

// ClaimSpec is a ReadWriteOnce claim named name asking class for size.
func ClaimSpec(name, class, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// ExpandClaim asks for size on the claim and waits (up to two minutes) until the expansion
// is over: status.capacity at least size, no resize condition and no resize status. It
// returns the claim as it last read it, and fails the test with that claim otherwise.
func ExpandClaim(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns, claim, size string) *corev1.PersistentVolumeClaim {
	t.Helper()
	if err := kubecheck.RequestSize(ctx, cs, ns, claim, size); err != nil {
		t.Fatal(err)
	}
	last, err := kubecheck.WaitForClaim(ctx, cs, ns, claim, 2*time.Minute, kubecheck.Expanded(size))
	if err != nil {
		raw, _ := json.Marshal(last)
		t.Fatalf("waiting for claim %s to be expanded to %s: %v; last claim: %s", claim, size, err, raw)
	}
	return last
}

// WaitForEvent waits up to timeout for an event of the object named name in ns that match
// accepts, and fails the test, naming what it waited for and the events it saw, otherwise.
func WaitForEvent(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns, name, what string, timeout time.Duration, match func(corev1.Event) bool) corev1.Event {
	t.Helper()
	ev, err := kubecheck.WaitForEvent(ctx, cs, ns, name, timeout, match)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return ev
}
