// Package snapshotcontroller is kubevol's snapshot-controller role
// (kubernetes-csi/external-snapshotter's "common controller"): it binds VolumeSnapshots to
// VolumeSnapshotContents, creates the contents of dynamic snapshots from their
// VolumeSnapshotClass, copies the contents' status into the snapshots, and owns the snapshot,
// content-bound and source-claim finalizers and the deletion of contents. It never calls CSI:
// the csi-snapshotter role does. RoleConfig is what it shares with groupcontroller, the
// role's group half.
//
// One queue of VolumeSnapshot keys in the sample-controller shape; contents only wake up the
// snapshot they name.
package snapshotcontroller

import (
	"context"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// Component is the event source, as upstream names it.
const Component = "snapshot-controller"

// Config configures a Controller.
type Config struct {
	RoleConfig
}

// Controller is the snapshot-controller.
type Controller struct {
	cfg       Config
	runner    *controller.Runner
	snapshots snaplisters.VolumeSnapshotLister
	contents  snaplisters.VolumeSnapshotContentLister
	classes   snaplisters.VolumeSnapshotClassLister
	claims    corelisters.PersistentVolumeClaimLister
	volumes   corelisters.PersistentVolumeLister
	// nodes is set with Distributed only (upstream watches Nodes then, and its RBAC grants
	// them only then).
	nodes      corelisters.NodeLister
	queue      *controller.Queue[string]
	stopEvents func()
	recorder   record.EventRecorder
}

// New builds the controller and its informers.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	cfg.Complete()
	snapF := snapinformers.NewSharedInformerFactory(cfg.Snap, cfg.Resync)
	coreF := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	vs := snapF.Snapshot().V1().VolumeSnapshots()
	vsc := snapF.Snapshot().V1().VolumeSnapshotContents()
	class := snapF.Snapshot().V1().VolumeSnapshotClasses()
	pvc := coreF.Core().V1().PersistentVolumeClaims()
	pv := coreF.Core().V1().PersistentVolumes()
	recorder, stopEvents := controller.NewEventRecorder(ctx, cfg.Client, Component)
	c := &Controller{
		cfg:       cfg,
		runner:    controller.NewRunner(Component),
		snapshots: vs.Lister(), contents: vsc.Lister(), classes: class.Lister(),
		claims: pvc.Lister(), volumes: pv.Lister(),
		queue:      cfg.NewQueue("snapshot-controller-snapshot"),
		stopEvents: stopEvents,
		recorder:   recorder,
	}
	// Every informer is obtained from its factory (Informer()) before the sources start.
	_, _, _ = class.Informer(), pvc.Informer(), pv.Informer()
	if cfg.Distributed {
		nodes := coreF.Core().V1().Nodes()
		c.nodes = nodes.Lister()
		_ = nodes.Informer()
	}
	c.runner.AddSource(controller.ChanInformers(snapF), controller.Informers(coreF))
	controller.Handle(c.runner, c.queue, cfg.Workers, c.syncSnapshot)
	c.runner.Every(30*time.Second, c.updateInFlight)
	if _, err := vs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.snapshotDeleted,
	}); err != nil {
		return nil, err
	}
	// A content wakes up the snapshot it names: its status is copied there, and its deletion
	// releases the snapshot's bound finalizer.
	if _, err := vsc.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueContent,
		UpdateFunc: func(_, obj any) { c.enqueueContent(obj) },
		DeleteFunc: c.enqueueContent,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopEvents()
	klog.FromContext(ctx).Info("Starting snapshot-controller", "workers", c.cfg.Workers)
	return c.runner.Run(ctx)
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

func (c *Controller) snapshotDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Forget(key)
	}
}

func (c *Controller) enqueueContent(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	content, ok := obj.(*snapv1.VolumeSnapshotContent)
	if !ok || content.Spec.VolumeSnapshotRef.Name == "" {
		return
	}
	c.queue.Add(content.Spec.VolumeSnapshotRef.Namespace + "/" + content.Spec.VolumeSnapshotRef.Name)
}
