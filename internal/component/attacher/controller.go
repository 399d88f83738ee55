// Package attacher is kubevol's CSI attacher: it turns VolumeAttachments into
// ControllerPublishVolume and ControllerUnpublishVolume calls, as
// kubernetes-csi/external-attacher does, and reports the result in the VolumeAttachment
// status that the attach/detach controller and the node wait for.
//
// Three queues in the sample-controller shape: VolumeAttachments to attach, VolumeAttachments
// to detach (those being deleted), and PersistentVolumes, which lose the attacher's
// finalizer once no VolumeAttachment names them. external-attacher serves attach and detach
// from one queue and one pool of --worker-threads workers, so that a burst of slow detaches
// holds back every attach behind it (external-attacher#706, #761); here each operation has
// its own queue and --worker-threads workers of its own, and the two queues are Exclusive,
// so a VolumeAttachment is still never attached and detached at once.
package attacher

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Config configures a Controller.
type Config struct {
	// ControllerConfig names the driver and its connection; VolumeAttachments of other
	// attachers are ignored. Workers is upstream --worker-threads: that many workers attach
	// and as many detach, as external-provisioner runs --worker-threads workers for
	// provisioning and as many for deletion.
	sidecar.ControllerConfig
	// DefaultFSType is used for filesystem volumes whose PV names none.
	DefaultFSType string
	// ReconcileSync is the period of the ListVolumes reconcile (upstream --reconcile-sync);
	// 0 disables it. It runs only for drivers with LIST_VOLUMES_PUBLISHED_NODES.
	ReconcileSync time.Duration
	// MaxEntries is max_entries of each ListVolumes page (upstream --max-entries); 0 lets
	// the driver choose.
	MaxEntries int32

	// informers, set by this package's tests only, is the factory New reads from instead
	// of one of its own, so that a test can fill its indexers and call a sync directly.
	informers informers.SharedInformerFactory
}

// Controller attaches and detaches the driver's VolumeAttachments.
type Controller struct {
	cfg      Config
	runner   *controller.Runner
	vaLister storagelisters.VolumeAttachmentLister
	pvLister corelisters.PersistentVolumeLister
	nodes    storagelisters.CSINodeLister
	vaIndex  cache.Indexer
	// attachQueue holds the VolumeAttachments to attach, detachQueue those being deleted.
	attachQueue *controller.Queue[string]
	detachQueue *controller.Queue[string]
	pvQueue     *controller.Queue[string]
	recorder    record.EventRecorder
	// stopEvents stops the recorder once the workers are done.
	stopEvents func()
	// publishes is false when the driver lacks PUBLISH_UNPUBLISH_VOLUME: then, like
	// upstream's trivial handler, VolumeAttachments are marked attached without a call.
	publishes bool
	// reconciles is true when the driver reports published nodes in ListVolumes.
	reconciles bool

	// superseded holds, per VolumeAttachment, the resourceVersion of a write this
	// controller has already overwritten: the informer delivers that version after the
	// sync that made it, and acting on it would repeat ControllerPublish for nothing.
	superseded controller.Superseded[string]
	// republish holds the VolumeAttachments the reconcile found attached but not published
	// (upstream's forceSync): taken by the next sync, put back if it fails.
	republish controller.Flags[string]
	// syncing holds the VolumeAttachments a worker is syncing, and unobserved the status
	// writes the informer has not delivered yet: for those the cache may lag behind the
	// driver, and the reconcile leaves them alone.
	syncing    controller.Flags[string]
	unobserved controller.Superseded[string]

	// vas and pvs write with PATCH, the only write external-attacher's role grants on
	// volumeattachments, their status and persistentvolumes.
	vas write.Writer[*storagev1.VolumeAttachment]
	pvs write.Writer[*corev1.PersistentVolume]
}

// New builds a Controller. It asks the driver for its capabilities once.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if err := cfg.Complete("attacher"); err != nil {
		return nil, err
	}
	caps, err := cfg.CSI.Capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("attacher: driver capabilities: %w", err)
	}
	factory := cfg.informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	}
	vaInformer := factory.Storage().V1().VolumeAttachments()
	pvInformer := factory.Core().V1().PersistentVolumes()
	csiNodes := factory.Storage().V1().CSINodes()
	if err := sidecar.IndexAttachmentsByPV(vaInformer.Informer()); err != nil {
		return nil, err
	}

	recorder, stopEvents := cfg.NewEvents(ctx, "kubevol-attacher")
	c := &Controller{
		cfg:         cfg,
		runner:      controller.NewRunner("attacher"),
		vaLister:    vaInformer.Lister(),
		pvLister:    pvInformer.Lister(),
		nodes:       csiNodes.Lister(),
		vaIndex:     vaInformer.Informer().GetIndexer(),
		attachQueue: sidecar.NewQueue[string](&cfg.ControllerConfig, "volumeattachments-attach"),
		detachQueue: sidecar.NewQueue[string](&cfg.ControllerConfig, "volumeattachments-detach"),
		pvQueue:     sidecar.NewQueue[string](&cfg.ControllerConfig, "persistentvolumes"),
		recorder:    recorder,
		stopEvents:  stopEvents,
		publishes:   caps.Controller[publishCapability],
		reconciles:  reconciles(caps),
		vas:         write.VolumeAttachments(cfg.Client, write.Patch),
		pvs:         write.PersistentVolumes(cfg.Client, write.Patch),
	}
	c.vas.Recorder, c.pvs.Recorder = recorder, recorder
	controller.Exclusive(c.attachQueue, c.detachQueue)
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
	c.runner.AddSource(controller.Informers(factory))
	controller.Handle(c.runner, c.attachQueue, cfg.Workers, c.syncAttach)
	controller.Handle(c.runner, c.detachQueue, cfg.Workers, c.syncDetach)
	controller.Handle(c.runner, c.pvQueue, 1, c.syncPV)
	if c.reconciles && cfg.ReconcileSync > 0 {
		// Like upstream: a first pass right away, then one every period after the last ended.
		c.runner.Every(cfg.ReconcileSync, func(ctx context.Context) {
			if err := c.reconcile(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Reconciling VolumeAttachments with the driver failed")
			}
		})
	}
	return c, nil
}

// Run attaches and detaches until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopEvents()
	klog.FromContext(ctx).Info("Starting attacher", "driver", c.cfg.DriverName, "controllerPublish", c.publishes, "attachWorkers", c.cfg.Workers, "detachWorkers", c.cfg.Workers,
		"reconcile", c.reconciles && c.cfg.ReconcileSync > 0, "reconcileSync", c.cfg.ReconcileSync)
	return c.runner.Run(ctx)
}

func (c *Controller) enqueueVA(obj any) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == c.cfg.DriverName {
		c.queueOf(va).Add(va.Name)
	}
}

// queueOf is the queue of what va needs: detaching once it is being deleted, else
// attaching. That is the choice external-attacher's handler makes after it took the key
// from its one queue, made before instead.
func (c *Controller) queueOf(va *storagev1.VolumeAttachment) *controller.Queue[string] {
	if va.DeletionTimestamp != nil {
		return c.detachQueue
	}
	return c.attachQueue
}

// vaUpdated skips updates that only record an attach or detach error: the failed key is
// already queued with backoff, and an immediate sync would defeat it (as upstream's
// shouldEnqueueVAChange). Periodic resyncs (same resourceVersion) always pass.
func (c *Controller) vaUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*storagev1.VolumeAttachment)
	cur, ok2 := newObj.(*storagev1.VolumeAttachment)
	if ok1 && ok2 {
		c.unobserved.Delivered(cur.Name, old.ResourceVersion, cur.ResourceVersion)
		c.superseded.Delivered(cur.Name, old.ResourceVersion, cur.ResourceVersion)
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

// settled reports whether the cached VolumeAttachment is all there is to it: no worker is
// syncing it and every status write of ours has reached the cache. A sync marks its write
// before it stops syncing, so reading syncing first never misses both.
func (c *Controller) settled(name string) bool {
	return !c.syncing.Has(name) && !c.unobserved.Pending(name)
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
	c.superseded.Forget(va.Name)
	c.unobserved.Forget(va.Name)
	c.republish.Clear(va.Name)
	if va.Spec.Source.PersistentVolumeName != nil {
		c.pvQueue.Add(*va.Spec.Source.PersistentVolumeName)
	}
}

func (c *Controller) enqueuePV(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && slices.Contains(pv.Finalizers, c.finalizer()) {
		c.pvQueue.Add(pv.Name)
	}
}
