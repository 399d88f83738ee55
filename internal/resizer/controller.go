// Package resizer is kubevol's CSI resizer: it turns a PersistentVolumeClaim whose storage
// request grew into a ControllerExpandVolume call, as kubernetes-csi/external-resizer does,
// and records the outcome in the claim's status (allocatedResources,
// allocatedResourceStatuses, conditions) and in the PV's capacity, where the node and
// `kubectl describe` read it. The node side (NodeExpandVolume) belongs to the node agent.
//
// One queue of claim keys, in the sample-controller shape; PVs and, when in-use handling is
// on, pods only wake claims up.
package resizer

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/sidecar"
)

// Config configures a Controller.
type Config struct {
	// ControllerConfig names the driver and its connection; claims of other drivers are
	// ignored. Workers is upstream --workers.
	sidecar.ControllerConfig
	// HandleVolumeInUseError (upstream --handle-volume-inuse-error) holds back the expansion
	// of a volume that a pod uses once the driver refused it with FAILED_PRECONDITION.
	HandleVolumeInUseError bool
}

// Controller expands the driver's volumes when their claims ask for more storage.
type Controller struct {
	cfg      Config
	factory  informers.SharedInformerFactory
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	pods     cache.Indexer // nil unless HandleVolumeInUseError
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	events   record.EventBroadcaster

	// expands is false when the driver lacks EXPAND_VOLUME: then, like upstream's trivial
	// resizer, the PV grows without a call and the node does the expansion.
	expands     bool
	multiWriter bool

	// finalErrors holds the claims whose last ControllerExpandVolume failed with a final
	// error, so nothing can still be in progress in the driver: only then may the user's
	// smaller request replace allocatedResources (RecoverVolumeExpansionFailure). After a
	// restart it is empty, and the resizer finishes allocatedResources first, the safe side.
	finalErrors keySet
	// inUseErrors holds the claims whose last ControllerExpandVolume was refused with
	// FAILED_PRECONDITION: while a pod uses one, the driver is not asked again (upstream's
	// in-use error). After a restart it is empty, and the driver is asked once more.
	inUseErrors keySet
}

// keySet is a set of claim keys that the workers share.
type keySet struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (s *keySet) set(key string, in bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !in {
		delete(s.keys, key)
		return
	}
	if s.keys == nil {
		s.keys = map[string]bool{}
	}
	s.keys[key] = true
}

func (s *keySet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key]
}

// New builds a Controller. It asks the driver for its capabilities once.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if err := cfg.Complete("resizer"); err != nil {
		return nil, err
	}
	caps, err := cfg.CSI.Capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("resizer: driver capabilities: %w", err)
	}
	factory := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	claimInformer := factory.Core().V1().PersistentVolumeClaims()
	pvInformer := factory.Core().V1().PersistentVolumes()

	broadcaster, recorder := cfg.NewEvents(ctx, "kubevol-resizer")
	c := &Controller{
		cfg:         cfg,
		factory:     factory,
		claims:      claimInformer.Lister(),
		volumes:     pvInformer.Lister(),
		synced:      []cache.InformerSynced{claimInformer.Informer().HasSynced, pvInformer.Informer().HasSynced},
		queue:       cfg.NewQueue("persistentvolumeclaims"),
		recorder:    recorder,
		events:      broadcaster,
		expands:     caps.Controller[expandCapability],
		multiWriter: caps.Controller[multiWriterCap],
	}
	_, err = claimInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueClaim,
		UpdateFunc: c.claimUpdated,
		DeleteFunc: c.claimDeleted,
	})
	if err != nil {
		return nil, err
	}
	// A claim can be synced before its PV reaches the cache; the PV's arrival retries it.
	// PV updates are left out: the only ones that matter are this controller's own.
	_, err = pvInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.pvAdded})
	if err != nil {
		return nil, err
	}
	if cfg.HandleVolumeInUseError {
		// Upstream watches pods for every driver: whether a driver expands in use is only
		// known from its answer, as the VolumeExpansion plugin capability is optional.
		if err := c.watchPods(factory); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer runtime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	defer c.events.Shutdown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting resizer", "driver", c.cfg.DriverName, "controllerExpand", c.expands,
		"watchPods", c.pods != nil, "workers", c.cfg.Workers)

	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return ctx.Err()
	}
	for range c.cfg.Workers {
		go wait.UntilWithContext(ctx, c.drain, time.Second)
	}
	<-ctx.Done()
	logger.Info("Stopping resizer")
	return nil
}

// drain handles claims until the queue shuts down.
func (c *Controller) drain(ctx context.Context) {
	for c.next(ctx) {
	}
}

// next syncs one claim: a failure is retried with the claim's own exponential backoff, a
// success forgets it.
func (c *Controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	err := c.syncClaim(ctx, key)
	if err == nil {
		c.queue.Forget(key)
		return true
	}
	klog.FromContext(ctx).V(2).Info("Sync failed, will retry", "pvc", key, "err", err, "retries", c.queue.NumRequeues(key))
	c.queue.AddRateLimited(key)
	return true
}

func (c *Controller) enqueueClaim(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// claimUpdated lets through what can start, redirect or unblock an expansion, and every
// periodic resync (same resourceVersion). The status writes of this controller are left
// out: a failed claim is already queued with backoff, and an immediate sync would defeat
// it, as upstream's updatePVC filter also avoids.
func (c *Controller) claimUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.PersistentVolumeClaim)
	cur, ok2 := newObj.(*corev1.PersistentVolumeClaim)
	if ok1 && ok2 && !claimChanged(old, cur) {
		return
	}
	c.enqueueClaim(newObj)
}

func claimChanged(old, cur *corev1.PersistentVolumeClaim) bool {
	if old.ResourceVersion == cur.ResourceVersion {
		return true
	}
	oldReq, curReq := old.Spec.Resources.Requests[corev1.ResourceStorage], cur.Spec.Resources.Requests[corev1.ResourceStorage]
	oldCap, curCap := old.Status.Capacity[corev1.ResourceStorage], cur.Status.Capacity[corev1.ResourceStorage]
	curStatus := cur.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
	return !oldReq.Equal(curReq) || !oldCap.Equal(curCap) ||
		old.Annotations[AnnStorageResizer] != cur.Annotations[AnnStorageResizer] ||
		old.Status.Phase != cur.Status.Phase || old.Spec.VolumeName != cur.Spec.VolumeName ||
		// The node gave up: the controller resets the claim so the node can try again.
		curStatus == corev1.PersistentVolumeClaimNodeResizeInfeasible && old.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != curStatus
}

func (c *Controller) claimDeleted(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Forget(key)
	c.finalErrors.set(key, false)
	c.inUseErrors.set(key, false)
}

func (c *Controller) pvAdded(obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != c.cfg.DriverName {
		return
	}
	c.queue.Add(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name)
}
