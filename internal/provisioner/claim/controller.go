// Package claim is the provisioner's claim controller: it watches PersistentVolumeClaims,
// and for each one addressed to this driver it calls CSI CreateVolume and saves the
// PersistentVolume that the PV controller then binds. It reproduces external-provisioner's
// claim flow (sig-storage-lib-external-provisioner's claim queue plus ep's Provision), with
// a durable intent record around CreateVolume so that no backend volume outlives its claim.
package claim

import (
	"context"
	"fmt"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csi"
	"github.com/kubevol/kubevol/internal/provisioner/intent"
	"github.com/kubevol/kubevol/internal/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/provisioner/pvspec"
)

// Config is everything the claim controller needs.
type Config struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	CSI      *csi.Conn
	Caps     *csi.Capabilities
	Driver   string
	Identity string
	Journal  *intent.Journal
	Metrics  *metrics.Metrics
	// Snapshots reads VolumeSnapshots and their contents; nil disables snapshot data sources.
	Snapshots snapclient.Interface

	Claims   coreinformers.PersistentVolumeClaimInformer
	Volumes  coreinformers.PersistentVolumeInformer
	Classes  storageinformers.StorageClassInformer
	Nodes    coreinformers.NodeInformer       // nil without topology
	CSINodes storageinformers.CSINodeInformer // nil without topology

	VolumeNamePrefix            string
	VolumeNameUUIDLength        int
	DefaultFSType               string
	ExtraCreateMetadata         bool
	StrictTopology              bool
	ImmediateTopology           bool
	ControllerPublishReadOnly   bool
	PreventVolumeModeConversion bool
	RetryIntervalStart          time.Duration
	RetryIntervalMax            time.Duration
}

// Controller is the claim controller.
type Controller struct {
	cfg      Config
	claims   cache.Indexer
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	nodes    corelisters.NodeLister
	csiNodes storagelisters.CSINodeLister
	queue    workqueue.TypedRateLimitingInterface[types.UID]
	synced   []cache.InformerSynced
	topology bool

	// saved holds the claims whose PV this process created, until the PV informer shows it,
	// so that a claim update arriving first does not repeat CreateVolume and the PV create.
	mu    sync.Mutex
	saved map[types.UID]time.Time
}

const uidIndex = "uid"

// New wires the controller to its informers. Call it before the informers start.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		cfg:     cfg,
		claims:  cfg.Claims.Informer().GetIndexer(),
		volumes: cfg.Volumes.Lister(),
		classes: cfg.Classes.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](cfg.RetryIntervalStart, cfg.RetryIntervalMax),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "claims", MetricsProvider: cfg.Metrics.Queue}),
		synced:   []cache.InformerSynced{cfg.Claims.Informer().HasSynced, cfg.Volumes.Informer().HasSynced, cfg.Classes.Informer().HasSynced},
		topology: cfg.Caps.Plugin[csiPluginTopology],
		saved:    map[types.UID]time.Time{},
	}
	if c.topology {
		if cfg.Nodes == nil || cfg.CSINodes == nil {
			return nil, fmt.Errorf("claim controller: the driver supports topology but no Node/CSINode informers were given")
		}
		c.nodes, c.csiNodes = cfg.Nodes.Lister(), cfg.CSINodes.Lister()
		c.synced = append(c.synced, cfg.Nodes.Informer().HasSynced, cfg.CSINodes.Informer().HasSynced)
	}
	if err := cfg.Claims.Informer().AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			return []string{string(pvc.UID)}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	if _, err := cfg.Volumes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
			c.forgetSaved(pv.Spec.ClaimRef.UID)
		}
	}}); err != nil {
		return nil, err
	}
	_, err := cfg.Claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onClaim,
		UpdateFunc: func(_, obj any) { c.onClaim(obj) },
		DeleteFunc: c.onClaimDeleted,
	})
	return c, err
}

// onClaim enqueues the claims this driver may have to act on; the rest are skipped before
// they cost a queue round trip.
func (c *Controller) onClaim(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if _, inFlight := c.cfg.Journal.Get(pvc.UID); inFlight {
		c.queue.Add(pvc.UID)
		return
	}
	if pvc.DeletionTimestamp != nil && hasFinalizer(pvc.Finalizers, pvspec.CloneFinalizer) {
		c.queue.Add(pvc.UID)
		return
	}
	if pvc.Spec.VolumeName == "" && pvc.DeletionTimestamp == nil && c.addressedToUs(pvc) {
		c.queue.Add(pvc.UID)
	}
}

func (c *Controller) onClaimDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		if _, inFlight := c.cfg.Journal.Get(pvc.UID); inFlight {
			c.queue.Add(pvc.UID)
		}
	}
}

// Enqueue asks for a claim to be synced, e.g. for the records found in the journal at start.
func (c *Controller) Enqueue(uid types.UID) { c.queue.Add(uid) }

// Run processes claims with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	logger.Info("Starting claim workers", "workers", workers)
	for range workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	uid, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(uid)
	res := c.sync(ctx, uid)
	switch {
	case res.err != nil:
		klog.FromContext(ctx).V(2).Info("Claim sync failed; will retry", "claimUID", uid, "err", res.err)
		c.queue.AddRateLimited(uid)
	case res.after > 0:
		c.queue.Forget(uid)
		c.queue.AddAfter(uid, res.after)
	default:
		c.queue.Forget(uid)
	}
	return true
}

// result says what to do with a claim after a sync: nothing, retry with backoff (err), or
// look again after a fixed delay.
type result struct {
	err   error
	after time.Duration
}

func (c *Controller) claimByUID(uid types.UID) *corev1.PersistentVolumeClaim {
	objs, err := c.claims.ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.PersistentVolumeClaim)
}

func hasFinalizer(fs []string, f string) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}
