package up

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	storagev1ac "k8s.io/client-go/applyconfigurations/storage/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultStorageClass is the StorageClass `kubevol up` installs and marks default.
const DefaultStorageClass = "kubevol-local"

// NetworkStorageClass is the StorageClass of the built-in driver's network volumes
// (placement=network): reachable from every node, as network storage is, so a pod can move
// between nodes and ReadWriteMany claims are offered.
const NetworkStorageClass = "kubevol-network"

const fieldManager = "kubevol-up"

// installObjects applies, server-side and idempotently, what the components expect to find:
// their namespace, the CSIDriver that tells the attach/detach controller and the node how to
// treat the driver, a default StorageClass of node-local volumes and one of network volumes.
func installObjects(ctx context.Context, cs kubernetes.Interface, attachRequired bool) error {
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if _, err := cs.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(Namespace), opts); err != nil {
		return err
	}
	csiDriver := storagev1ac.CSIDriver(DriverName).WithSpec(storagev1ac.CSIDriverSpec().
		// By default the no-attach path: the driver's volumes are local, there is nothing to
		// attach. Benchmarks ask for the attach path to measure it.
		WithAttachRequired(attachRequired).
		WithPodInfoOnMount(true).
		WithFSGroupPolicy(storagev1.FileFSGroupPolicy).
		WithVolumeLifecycleModes(storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral))
	if _, err := cs.StorageV1().CSIDrivers().Apply(ctx, csiDriver, opts); err != nil {
		return err
	}
	sc := storagev1ac.StorageClass(DefaultStorageClass).
		WithAnnotations(map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}).
		WithProvisioner(DriverName).
		WithParameters(map[string]string{"type": "dir"}).
		WithReclaimPolicy(corev1.PersistentVolumeReclaimDelete).
		// Local volumes live on one node: provision where the pod is scheduled.
		WithVolumeBindingMode(storagev1.VolumeBindingWaitForFirstConsumer).
		WithAllowVolumeExpansion(true)
	if _, err := cs.StorageV1().StorageClasses().Apply(ctx, sc, opts); err != nil {
		return err
	}
	network := storagev1ac.StorageClass(NetworkStorageClass).
		WithProvisioner(DriverName).
		WithParameters(map[string]string{"type": "dir", "placement": "network"}).
		WithReclaimPolicy(corev1.PersistentVolumeReclaimDelete).
		// Reachable from every node: nothing to wait for, the volume follows the pod.
		WithVolumeBindingMode(storagev1.VolumeBindingImmediate).
		WithAllowVolumeExpansion(true)
	_, err := cs.StorageV1().StorageClasses().Apply(ctx, network, opts)
	return err
}
