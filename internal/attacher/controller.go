// Package attacher is kubevol's CSI attacher: it turns VolumeAttachments into
// ControllerPublishVolume and ControllerUnpublishVolume calls, as
// kubernetes-csi/external-attacher does, and reports the result in the VolumeAttachment
// status that the attach/detach controller and the node wait for.
//
// Two queues, one per object kind, in the sample-controller shape: VolumeAttachments are
// attached or detached; PersistentVolumes lose the attacher's finalizer once no
// VolumeAttachment names them.
package attacher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/sidecar"
)

// Config configures a Controller.
type Config struct {
	// ControllerConfig names the driver and its connection; VolumeAttachments of other
	// attachers are ignored. Workers is upstream --worker-threads.
	sidecar.ControllerConfig
	// DefaultFSType is used for filesystem volumes whose PV names none.
	DefaultFSType string
	// ReconcileSync is the period of the ListVolumes reconcile (upstream --reconcile-sync);
	// 0 disables it. It runs only for drivers with LIST_VOLUMES_PUBLISHED_NODES.
	ReconcileSync time.Duration
	// MaxEntries is max_entries of each ListVolumes page (upstream --max-entries); 0 lets
	// the driver choose.
	MaxEntries int32
}

// Controller attaches and detaches the driver's VolumeAttachments.
type Controller struct {
	cfg      Config
	factory  informers.SharedInformerFactory
	vaLister storagelisters.VolumeAttachmentLister
	pvLister corelisters.PersistentVolumeLister
	nodes    storagelisters.CSINodeLister
	vaIndex  cache.Indexer
	synced   []cache.InformerSynced
	vaQueue  workqueue.TypedRateLimitingInterface[string]
	pvQueue  workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	// publishes is false when the driver lacks PUBLISH_UNPUBLISH_VOLUME: then, like
	// upstream's trivial handler, VolumeAttachments are marked attached without a call.
	publishes bool
	// reconciles is true when the driver reports published nodes in ListVolumes.
	reconciles bool
	events     record.EventBroadcaster

	// superseded holds, per VolumeAttachment, the resourceVersion of a write this
	// controller has already overwritten: the informer delivers that version after the
	// sync that made it, and acting on it would repeat ControllerPublish for nothing.
	mu         sync.Mutex
	superseded map[string]string
	// republish holds the VolumeAttachments the reconcile found attached but not published.
	republish map[string]bool
	// syncing holds the VolumeAttachments a worker is syncing, and unobserved the
	// resourceVersion of a status write the informer has not delivered yet: for those the
	// cache may lag behind the driver, and the reconcile leaves them alone.
	syncing    map[string]bool
	unobserved map[string]string
}

const vaByPVIndex = "pv"

// New builds a Controller. It asks the driver for its capabilities once.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if err := cfg.Complete("attacher"); err != nil {
		return nil, err
	}
	caps, err := cfg.CSI.Capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("attacher: driver capabilities: %w", err)
	}
	factory := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	vaInformer := factory.Storage().V1().VolumeAttachments()
	pvInformer := factory.Core().V1().PersistentVolumes()
	csiNodes := factory.Storage().V1().CSINodes()
	if err := vaInformer.Informer().AddIndexers(cache.Indexers{vaByPVIndex: indexByPV}); err != nil {
		return nil, err
	}

	broadcaster, recorder := cfg.NewEvents(ctx, "kubevol-attacher")
	c := &Controller{
		cfg:       cfg,
		factory:   factory,
		vaLister:  vaInformer.Lister(),
		pvLister:  pvInformer.Lister(),
		nodes:     csiNodes.Lister(),
		vaIndex:   vaInformer.Informer().GetIndexer(),
		synced:    []cache.InformerSynced{vaInformer.Informer().HasSynced, pvInformer.Informer().HasSynced, csiNodes.Informer().HasSynced},
		vaQueue:   cfg.NewQueue("volumeattachments"),
		pvQueue:   cfg.NewQueue("persistentvolumes"),
		recorder:  recorder,
		publishes: caps.Controller[publishCapability],
		events:    broadcaster,

		reconciles: reconciles(caps),
		superseded: map[string]string{},
		syncing:    map[string]bool{},
		unobserved: map[string]string{},
		republish:  map[string]bool{},
	}
	_, err = vaInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueVA,
		UpdateFunc: c.vaUpdated,
		DeleteFunc: c.vaDeleted,
	})
	if err != nil {
		return nil, err
	}
	_, err = pvInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePV,
		UpdateFunc: func(_, obj any) { c.enqueuePV(obj) },
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer runtime.HandleCrashWithContext(ctx)
	defer c.vaQueue.ShutDown()
	defer c.pvQueue.ShutDown()
	defer c.events.Shutdown()
	logger := klog.FromContext(ctx)
	reconcile := c.reconciles && c.cfg.ReconcileSync > 0
	logger.Info("Starting attacher", "driver", c.cfg.DriverName, "controllerPublish", c.publishes, "workers", c.cfg.Workers,
		"reconcile", reconcile, "reconcileSync", c.cfg.ReconcileSync)

	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return ctx.Err()
	}
	for range c.cfg.Workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { work(ctx, c.vaQueue, c.syncVA) }, time.Second)
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) { work(ctx, c.pvQueue, c.syncPV) }, time.Second)
	if reconcile {
		// Like upstream: a first pass right away, then one every period after the last ended.
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			if err := c.reconcile(ctx); err != nil {
				logger.Error(err, "Reconciling VolumeAttachments with the driver failed")
			}
		}, c.cfg.ReconcileSync)
	}
	<-ctx.Done()
	logger.Info("Stopping attacher")
	return nil
}

// work drains one queue: a failed key is retried with its own exponential backoff; a
// successful one has its backoff forgotten.
func work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		func() {
			defer q.Done(key)
			if err := sync(ctx, key); err != nil {
				klog.FromContext(ctx).V(2).Info("Sync failed, will retry", "key", key, "err", err, "retries", q.NumRequeues(key))
				q.AddRateLimited(key)
				return
			}
			q.Forget(key)
		}()
	}
}

func (c *Controller) enqueueVA(obj any) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == c.cfg.DriverName {
		c.vaQueue.Add(va.Name)
	}
}

// vaUpdated skips updates that only record an attach or detach error: the failed key is
// already queued with backoff, and an immediate sync would defeat it (as upstream's
// shouldEnqueueVAChange). Periodic resyncs (same resourceVersion) always pass.
func (c *Controller) vaUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*storagev1.VolumeAttachment)
	cur, ok2 := newObj.(*storagev1.VolumeAttachment)
	if ok2 {
		c.observed(cur)
	}
	if ok1 && ok2 && old.ResourceVersion != cur.ResourceVersion && onlyErrorsChanged(old, cur) {
		return
	}
	c.enqueueVA(newObj)
}

func onlyErrorsChanged(old, cur *storagev1.VolumeAttachment) bool {
	a, b := old.DeepCopy(), cur.DeepCopy()
	for _, va := range []*storagev1.VolumeAttachment{a, b} {
		va.ResourceVersion, va.ManagedFields = "", nil
		va.Status.AttachError, va.Status.DetachError = nil, nil
	}
	return equality.Semantic.DeepEqual(a, b)
}

// wrote records the resourceVersion of a status write until the informer delivers it.
func (c *Controller) wrote(name, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unobserved[name] = rv
}

func (c *Controller) observed(va *storagev1.VolumeAttachment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv, ok := c.unobserved[va.Name]; ok && rv == va.ResourceVersion {
		delete(c.unobserved, va.Name)
	}
}

// setSyncing marks a VolumeAttachment as being synced by a worker, or no longer.
func (c *Controller) setSyncing(name string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.syncing[name] = true
	} else {
		delete(c.syncing, name)
	}
}

// settled reports whether the cached VolumeAttachment is all there is to it: no worker is
// syncing it and every status write of ours has reached the cache.
func (c *Controller) settled(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, pending := c.unobserved[name]
	return !c.syncing[name] && !pending
}

func (c *Controller) markSuperseded(name, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.superseded[name] = rv
}

func (c *Controller) isSuperseded(va *storagev1.VolumeAttachment) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Presence matters: a missing entry must not match an object without a resourceVersion.
	rv, ok := c.superseded[va.Name]
	return ok && rv == va.ResourceVersion
}

// vaDeleted lets the PV of a deleted VolumeAttachment drop the attacher's finalizer.
func (c *Controller) vaDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return
	}
	c.mu.Lock()
	delete(c.superseded, va.Name)
	delete(c.republish, va.Name)
	delete(c.unobserved, va.Name)
	c.mu.Unlock()
	if va.Spec.Source.PersistentVolumeName != nil {
		c.pvQueue.Add(*va.Spec.Source.PersistentVolumeName)
	}
}

func (c *Controller) enqueuePV(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && slices.Contains(pv.Finalizers, c.finalizer()) {
		c.pvQueue.Add(pv.Name)
	}
}

func indexByPV(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return nil, nil
	}
	return []string{*va.Spec.Source.PersistentVolumeName}, nil
}
