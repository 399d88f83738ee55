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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/component/provisioner/intent"
	"github.com/kubevol/kubevol/internal/component/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Options are the claim controller's settings, upstream's flags of the same names; the
// provisioner's configuration embeds them.
type Options struct {
	VolumeNamePrefix            string
	VolumeNameUUIDLength        int
	DefaultFSType               string
	ExtraCreateMetadata         bool
	StrictTopology              bool
	ImmediateTopology           bool
	ControllerPublishReadOnly   bool
	PreventVolumeModeConversion bool
}

// Config is everything the claim controller needs.
type Config struct {
	// ControllerConfig is the client, the driver and its name, and the retry intervals;
	// the worker count is Register's.
	sidecar.ControllerConfig
	Options

	Recorder record.EventRecorder
	Caps     *csiclient.Capabilities
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

	// Node is set for a node deployment (--node-deployment); nil serves every node.
	Node *NodeDeployment
	// NoAttributesClasses is set when the apiserver does not serve storage.k8s.io/v1
	// VolumeAttributesClasses (before 1.34): a claim that names one is refused with that
	// reason instead of failing on each lookup.
	NoAttributesClasses bool
}

// Controller is the claim controller.
type Controller struct {
	cfg      Config
	claims   cache.Indexer
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	nodes    corelisters.NodeLister
	csiNodes storagelisters.CSINodeLister
	queue    *controller.Queue[types.UID]
	synced   []cache.InformerSynced
	topology bool

	// saved holds the claims whose PV this process created, until the PV informer shows it,
	// so that a claim update arriving first does not repeat CreateVolume and the PV create.
	saved controller.Flags[types.UID]
	race  *ownerRace
}

const uidIndex = "uid"

// New wires the controller to its informers. Call it before the informers start.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		cfg:      cfg,
		claims:   cfg.Claims.Informer().GetIndexer(),
		volumes:  cfg.Volumes.Lister(),
		classes:  cfg.Classes.Lister(),
		queue:    sidecar.NewQueue[types.UID](&cfg.ControllerConfig, "claims"),
		synced:   []cache.InformerSynced{cfg.Claims.Informer().HasSynced, cfg.Volumes.Informer().HasSynced, cfg.Classes.Informer().HasSynced},
		topology: cfg.Caps.Plugin[csiPluginTopology],
		race:     newOwnerRace(),
	}
	c.saved.Window = savedWindow
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
			c.saved.Clear(pv.Spec.ClaimRef.UID)
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

// Register adds the controller to r: it waits for its caches, then workers sync claims.
func (c *Controller) Register(r *controller.Runner, workers int) {
	r.AddSource(controller.Synced(c.synced...))
	controller.Handle(r, c.queue, workers, c.sync)
}

// Run runs the controller alone, on informers the caller starts, until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	r := controller.NewRunner("claims")
	c.Register(r, workers)
	_ = r.Run(ctx)
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
	if _, legacy := c.cfg.Journal.Legacy(pvc); legacy {
		c.queue.Add(pvc.UID)
		return
	}
	if pvc.DeletionTimestamp != nil && pvspec.HasFinalizer(pvc, pvspec.CloneFinalizer) {
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

func (c *Controller) claimByUID(uid types.UID) *corev1.PersistentVolumeClaim {
	objs, err := c.claims.ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.PersistentVolumeClaim)
}
