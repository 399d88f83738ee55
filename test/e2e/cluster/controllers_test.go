package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// The real kube-controller-manager PV controller must hand a dynamically provisioned claim to
// its external provisioner by annotating it; that is the contract the kubevol provisioner
// builds on, so it proves the controller runs with dynamic provisioning on.
func TestPVControllerAnnotatesClaimForExternalProvisioner(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t, 2*time.Minute)
	cs := framework.Client(t)
	ns := framework.Namespace(t)
	const provisioner = "kubevol.io/test"

	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "e2e-" + rand.String(6)},
		Provisioner: provisioner,
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-" + rand.String(6)}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &sc.Name,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var got *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = c
		return c.Annotations["volume.kubernetes.io/storage-provisioner"] != "", nil
	})
	if err != nil {
		t.Fatalf("PVC never got the storage-provisioner annotation (annotations %v): %v", got.Annotations, err)
	}
	if a := got.Annotations["volume.kubernetes.io/storage-provisioner"]; a != provisioner {
		t.Errorf("volume.kubernetes.io/storage-provisioner = %q, want %q", a, provisioner)
	}
	if got.Status.Phase != corev1.ClaimPending {
		t.Errorf("claim phase = %s, want Pending: nothing provisions for %s", got.Status.Phase, provisioner)
	}
	// The storage-object-in-use protection admission and controller are on.
	if !slices.Contains(got.Finalizers, "kubernetes.io/pvc-protection") {
		t.Errorf("claim finalizers %v lack kubernetes.io/pvc-protection", got.Finalizers)
	}
}

// The serviceaccount controllers and the root CA publisher run, so pods can be admitted and
// projected service-account volumes have their CA bundle.
func TestNamespacesGetDefaultServiceAccountAndRootCA(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t, 2*time.Minute)
	cs := framework.Client(t)
	ns := framework.Namespace(t)
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("namespace %s never got its default ServiceAccount and kube-root-ca.crt: %v", ns, err)
	}
}

// A VolumeAttributesClass gets the vac-protection finalizer at creation, and once deleted
// while no claim or volume names it, it goes: the protection controller runs and lifts the
// finalizer (without it, a deleted class stays forever, as the storage suite's
// volume-modify "vac-protection finalizer" spec found).
func TestDeletedAttributesClassGoes(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t, 2*time.Minute)
	cs := framework.Client(t)
	name := framework.AttributesClass(ctx, t, cs, "e2e-"+rand.String(6), "kubevol.io/test", map[string]string{"k": "v"})
	vac, err := cs.StorageV1().VolumeAttributesClasses().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(vac.Finalizers, "kubernetes.io/vac-protection") {
		t.Errorf("class finalizers %v lack kubernetes.io/vac-protection", vac.Finalizers)
	}
	if err := cs.StorageV1().VolumeAttributesClasses().Delete(ctx, vac.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var finalizers []string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := cs.StorageV1().VolumeAttributesClasses().Get(ctx, vac.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err == nil {
			finalizers = c.Finalizers
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("deleted VolumeAttributesClass %s still there after a minute (finalizers %v): %v", vac.Name, finalizers, err)
	}
}
