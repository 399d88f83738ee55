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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Config configures a Controller.
type Config struct {
	// ControllerConfig names the driver and its connection; claims of other drivers are
	// ignored. Workers is upstream --workers.
	sidecar.ControllerConfig
	// HandleVolumeInUseError (upstream --handle-volume-inuse-error) holds back the expansion
	// of a volume that a pod uses once the driver refused it with FAILED_PRECONDITION.
	HandleVolumeInUseError bool
	// AnnotateFsResize (upstream's alpha gate) records the claim's size before an expansion
	// on the PV (volume.alpha.kubernetes.io/pre-resize-capacity) until the node finished,
	// so that a claim deleted and re-created meanwhile can still be finished by the node.
	AnnotateFsResize bool
	// Modify configures volume modification (VolumeAttributesClass); see modify.go.
	Modify ModifyConfig

	// informers, set by this package's tests only, is the factory New reads from instead
	// of one of its own, so that a test can fill its indexers and call a sync directly.
	informers informers.SharedInformerFactory
}

// Controller expands the driver's volumes when their claims ask for more storage.
type Controller struct {
	cfg        Config
	runner     *controller.Runner
	claims     corelisters.PersistentVolumeClaimLister
	volumes    corelisters.PersistentVolumeLister
	pods       cache.Indexer // nil unless HandleVolumeInUseError
	queue      *controller.Queue[string]
	recorder   record.EventRecorder
	stopEvents func()

	// expands is false when the driver lacks EXPAND_VOLUME: then, like upstream's trivial
	// resizer, the PV grows without a call and the node does the expansion.
	expands     bool
	multiWriter bool

	// finalErrors holds the claims whose last ControllerExpandVolume failed with a final
	// error, so nothing can still be in progress in the driver: only then may the user's
	// smaller request replace allocatedResources (RecoverVolumeExpansionFailure). After a
	// restart it is empty, and the resizer finishes allocatedResources first, the safe side.
	finalErrors controller.Flags[string]
	// inUseErrors holds the claims whose last ControllerExpandVolume was refused with
	// FAILED_PRECONDITION: while a pod uses one, the driver is not asked again (upstream's
	// in-use error). After a restart it is empty, and the driver is asked once more.
	inUseErrors controller.Flags[string]

	// mod is the modification half, nil when it is off; locks keeps the expansion and the
	// modification of one claim apart.
	mod   *modifier
	locks claimLocks
	// superseded keeps syncs off cached claims and PVs this controller already wrote over,
	// under the claim's key and the PV's name (which holds no slash). claimWriter and pvWriter record
	// every write of theirs in it.
	superseded controller.Superseded[string]
	// claimWriter patches claims' status, pvWriter PVs: external-resizer's role grants
	// only patch.
	claimWriter write.Writer[*corev1.PersistentVolumeClaim]
	pvWriter    write.Writer[*corev1.PersistentVolume]
}

// mark sets or clears key's flag in f.
func mark(f *controller.Flags[string], key string, on bool) {
	if on {
		f.Set(key)
	} else {
		f.Clear(key)
	}
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
	factory := cfg.informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	}
	claimInformer := factory.Core().V1().PersistentVolumeClaims()
	pvInformer := factory.Core().V1().PersistentVolumes()

	recorder, stopEvents := cfg.NewEvents(ctx, "kubevol-resizer")
	c := &Controller{
		cfg:         cfg,
		runner:      controller.NewRunner("resizer"),
		claims:      claimInformer.Lister(),
		volumes:     pvInformer.Lister(),
		queue:       sidecar.NewQueue[string](&cfg.ControllerConfig, "persistentvolumeclaims"),
		recorder:    recorder,
		stopEvents:  stopEvents,
		expands:     caps.Controller[expandCapability],
		multiWriter: caps.Controller[multiWriterCap],
		claimWriter: write.Claims(cfg.Client, "", write.Patch),
		pvWriter:    write.PersistentVolumes(cfg.Client, write.Patch),
	}
	c.claimWriter.Recorder, c.claimWriter.Superseded = recorder, &c.superseded
	c.pvWriter.Recorder, c.pvWriter.Superseded = recorder, &c.superseded
	_, err = claimInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueClaim,
		UpdateFunc: c.claimUpdated,
		DeleteFunc: c.claimDeleted,
	})
	if err != nil {
		return nil, err
	}
	// A claim can be synced before its PV reaches the cache; the PV's arrival retries it.
	// Of the PV updates only those replacing a version this controller wrote over matter:
	// a sync of the claim may have waited for them.
	_, err = pvInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.pvAdded, UpdateFunc: c.pvUpdated, DeleteFunc: c.pvDeleted})
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
	if err := c.setupModify(ctx, factory, caps.Controller[modifyCapability]); err != nil {
		return nil, err
	}
	c.runner.AddSource(controller.Informers(factory))
	controller.Handle(c.runner, c.queue, cfg.Workers, c.serialised(c.syncClaim))
	return c, nil
}

// Run expands volumes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopEvents()
	klog.FromContext(ctx).Info("Starting resizer", "driver", c.cfg.DriverName, "controllerExpand", c.expands,
		"watchPods", c.pods != nil, "modify", c.mod != nil, "workers", c.cfg.Workers)
	return c.runner.Run(ctx)
}

func (c *Controller) enqueueClaim(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// claimUpdated lets through what can start, redirect or unblock an expansion, and every
// periodic resync (same resourceVersion). The status writes of this controller are left
// out: a failed claim is already queued with backoff, and an immediate sync would defeat
// it, as upstream's updatePVC filter also avoids. Only the delivery that replaces a
// version we wrote over passes: a sync may have waited for it.
func (c *Controller) claimUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.PersistentVolumeClaim)
	cur, ok2 := newObj.(*corev1.PersistentVolumeClaim)
	if ok1 && ok2 && c.superseded.Delivered(old.Namespace+"/"+old.Name, old.ResourceVersion, cur.ResourceVersion) {
		// Either half may have waited for this delivery; a sync with nothing to do is cheap.
		c.enqueueClaim(newObj)
		if c.mod != nil {
			c.mod.enqueue(newObj)
		}
		return
	}
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
	c.finalErrors.Clear(key)
	c.inUseErrors.Clear(key)
	c.superseded.Forget(key)
}

func (c *Controller) pvUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.PersistentVolume)
	cur, ok2 := newObj.(*corev1.PersistentVolume)
	if !ok1 || !ok2 || cur.Spec.ClaimRef == nil || !c.superseded.Delivered(old.Name, old.ResourceVersion, cur.ResourceVersion) {
		return
	}
	c.queue.Add(cur.Spec.ClaimRef.Namespace + "/" + cur.Spec.ClaimRef.Name)
	if c.mod != nil {
		c.mod.queue.Add(cur.Spec.ClaimRef.Namespace + "/" + cur.Spec.ClaimRef.Name)
	}
}

func (c *Controller) pvDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.superseded.Forget(key)
	}
}

func (c *Controller) pvAdded(obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || !c.ours(pv) {
		return
	}
	c.queue.Add(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name)
}
