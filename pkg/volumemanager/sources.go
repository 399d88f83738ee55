package volumemanager

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// ObjectKind is the kind of an object that pod volumes project and the manager keeps
// fresh.
type ObjectKind string

// The kinds of ObjectRef.
const (
	KindConfigMap ObjectKind = "ConfigMap"
	KindSecret    ObjectKind = "Secret"
)

// ObjectRef names a ConfigMap or Secret that a pod's volumes project.
type ObjectRef struct {
	Kind      ObjectKind
	Namespace string
	Name      string
}

// ObjectSource is where the manager reads the API objects that the volumes of its pods
// refer to. Config.Objects sets it; the default, NewAPIObjectSource, reads them as a
// kubelet does, within what the Node authorizer grants a node (and works as well with a
// broader client).
//
// Two kinds of reads:
//
//   - ConfigMaps and Secrets that pod volumes project are kept fresh while a pod references
//     them: SetPodObjects says which, GetConfigMap and GetSecret answer from what the source
//     holds (without a request), and Start's changed callback reports every change, so
//     updates reach the files at once.
//   - Everything else is read on demand, when an operation needs it: claims and their
//     volumes when a pod is (re)processed, VolumeAttachments while waiting for an attach,
//     and the CSI node-stage, node-publish and node-expand secrets a volume names. Errors
//     are retried by the manager with backoff; a Forbidden error is not final (a node is
//     refused for a moment after a pod is bound, until the API server's node graph has
//     seen the pod).
//
// The manager never reads an object of a pod once it no longer wants the pod's volumes:
// teardown works from what is on disk, after the node has lost access to the pod's objects.
// Methods are called from many goroutines.
type ObjectSource interface {
	// Start starts the source; changed is called (and must not block) whenever a
	// ConfigMap or Secret referenced through SetPodObjects may have changed, including
	// when it is created or deleted. Start must not block.
	Start(ctx context.Context, changed func(ObjectRef))
	// SetPodObjects replaces the ConfigMaps and Secrets that pod references; nil forgets
	// the pod. It may be called before Start.
	SetPodObjects(pod types.UID, refs []ObjectRef)
	// GetConfigMap and GetSecret return an object that a pod references (an error with
	// apierrors.IsNotFound if it does not exist).
	GetConfigMap(namespace, name string) (*v1.ConfigMap, error)
	GetSecret(namespace, name string) (*v1.Secret, error)
	// FetchSecret reads a secret that a CSI volume names (node-stage, node-publish,
	// node-expand), on every use, as the kubelet does.
	FetchSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	GetClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	GetVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
	GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
}

// PodSource delivers the pods bound to the node. Config.Pods sets it; the default,
// NewAPIPodSource, watches the API server's pods with a spec.nodeName field selector, as
// the kubelet does. A runtime that does not keep its pods in an API server implements it
// over its own store.
type PodSource interface {
	// AddEventHandler registers h for every add, update and delete of a pod; it is called
	// before Start. A deleted pod's last state may come as a cache.DeletedFinalStateUnknown.
	AddEventHandler(h cache.ResourceEventHandler) error
	// Start starts delivering events; it must not block.
	Start(ctx context.Context)
	// HasSynced reports whether every pod that existed at Start has been delivered.
	HasSynced() bool
	// GetPod returns the current pod of that name (an error with apierrors.IsNotFound if
	// there is none); ListPods returns all of them.
	GetPod(namespace, name string) (*v1.Pod, error)
	ListPods() ([]*v1.Pod, error)
}

// PodLifecycle is implemented by a PodSource whose pods' containers are run by someone
// else, a kubelet. The manager then keeps a pod's volumes until RuntimeRemoved says its
// containers are gone, instead of tearing them down at its deletionTimestamp or terminal
// phase, under containers still in their grace period (upstream: the populator's
// podStateProvider). The source must deliver an update of the pod when either answer
// changes.
type PodLifecycle interface {
	// ContainersTerminating: no container of the pod will start again, so volumes it does
	// not have yet are not set up (ShouldPodContainersBeTerminating).
	ContainersTerminating(uid types.UID) bool
	// RuntimeRemoved: the pod's containers are gone (ShouldPodRuntimeBeRemoved).
	RuntimeRemoved(uid types.UID) bool
}

// objectWatcher is an ObjectSource that can count its watches, for the metrics.
type objectWatcher interface {
	// Watches is the number of watches held per kind: the distinct objects referenced.
	Watches() map[ObjectKind]int
}

// claimBackoff is how a pod whose claims cannot be resolved yet (not bound, or refused
// while the node graph catches up) is retried: from 100 ms (the kubelet's populator
// period) doubling up to 2 s.
var claimBackoff = struct{ base, max time.Duration }{100 * time.Millisecond, 2 * time.Second}
