package snaptest

import (
	"context"
	"testing"
	"time"

	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// Clients returns fake clientsets holding core and snaps.
func Clients(core []runtime.Object, snaps ...runtime.Object) (*fake.Clientset, *snapfake.Clientset) {
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	return fake.NewSimpleClientset(core...), snapfake.NewSimpleClientset(snaps...)
}

// Dial connects to the test CSI driver at address and closes the connection when the test ends.
func Dial(t testing.TB, address string) *csiclient.Conn {
	t.Helper()
	conn, err := csiclient.Dial(csiclient.Config{Address: address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Getter is the read of a typed fake client.
type Getter[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// Find returns the named object, or the zero value when the fake API has none.
func Find[T any](ctx context.Context, g Getter[T], name string) T {
	obj, err := g.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		var zero T
		return zero
	}
	return obj
}

// MustGet returns the named object and fails the test when the fake API has none.
func MustGet[T any](t testing.TB, ctx context.Context, g Getter[T], name string) T {
	t.Helper()
	obj, err := g.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// BoundClaim returns claim ns/name (UID uid-<name>, with labels) bound both ways to the CSI
// volume pv-<name> of driver, whose handle is vol-<name>.
func BoundClaim(ns, name, driver string, labels map[string]string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-" + name}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
		Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Name: name, Namespace: ns, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-" + name}}}}
	return pvc, pv
}
