// Package groupcontroller is the group half of kubevol's snapshot-controller role
// (kubernetes-csi/external-snapshotter's common controller for VolumeGroupSnapshots): it
// creates the VolumeGroupSnapshotContent of a dynamic group from its class and the claims its
// selector picks, binds pre-provisioned group contents, and once the csi-snapshotter has
// taken the group, creates one VolumeSnapshot and VolumeSnapshotContent per member, so each
// member restores like any snapshot. It owns the group finalizers and the deletion of group
// contents and members. It never calls CSI.
//
// One queue of VolumeGroupSnapshot keys in the sample-controller shape; group contents and
// member snapshots only wake up their group.
package groupcontroller

import (
	"context"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	grouplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumegroupsnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snapshotcontroller"
	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// Component is the event source, as upstream names it (one binary with the snapshot role).
const Component = "snapshot-controller"

// Config configures a Controller.
type Config struct {
	snapshotcontroller.RoleConfig
}

// Controller is the group snapshot half of the snapshot-controller.
type Controller struct {
	cfg        Config
	runner     *controller.Runner
	groups     grouplisters.VolumeGroupSnapshotLister
	contents   grouplisters.VolumeGroupSnapshotContentLister
	classes    grouplisters.VolumeGroupSnapshotClassLister
	snapshots  snaplisters.VolumeSnapshotLister
	snapConts  snaplisters.VolumeSnapshotContentLister
	claims     corelisters.PersistentVolumeClaimLister
	volumes    corelisters.PersistentVolumeLister
	queue      *controller.Queue[string]
	stopEvents func()
	recorder   record.EventRecorder
}

// New builds the controller and its informers.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	cfg.Complete()
	snapF := snapinformers.NewSharedInformerFactory(cfg.Snap, cfg.Resync)
	coreF := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	vgs := snapF.Groupsnapshot().V1().VolumeGroupSnapshots()
	vgsc := snapF.Groupsnapshot().V1().VolumeGroupSnapshotContents()
	class := snapF.Groupsnapshot().V1().VolumeGroupSnapshotClasses()
	vs := snapF.Snapshot().V1().VolumeSnapshots()
	vsc := snapF.Snapshot().V1().VolumeSnapshotContents()
	pvc := coreF.Core().V1().PersistentVolumeClaims()
	pv := coreF.Core().V1().PersistentVolumes()
	recorder, stopEvents := controller.NewEventRecorder(ctx, cfg.Client, Component)
	c := &Controller{
		cfg: cfg, runner: controller.NewRunner(Component + "-group"),
		groups: vgs.Lister(), contents: vgsc.Lister(), classes: class.Lister(),
		snapshots: vs.Lister(), snapConts: vsc.Lister(), claims: pvc.Lister(), volumes: pv.Lister(),
		queue:      cfg.NewQueue("snapshot-controller-group-snapshot"),
		stopEvents: stopEvents,
		recorder:   recorder,
	}
	_, _, _, _ = class.Informer(), vsc.Informer(), pvc.Informer(), pv.Informer()
	c.runner.AddSource(controller.ChanInformers(snapF), controller.Informers(coreF))
	controller.Handle(c.runner, c.queue, cfg.Workers, c.syncGroup)
	c.runner.Every(30*time.Second, c.updateInFlight)
	handlers := []struct {
		inf cache.SharedIndexInformer
		key func(any) string
	}{
		{vgs.Informer(), groupKey},
		{vgsc.Informer(), contentGroupKey},
		{vs.Informer(), memberGroupKey},
	}
	for _, h := range handlers {
		key := h.key
		enqueue := func(obj any) {
			if k := key(obj); k != "" {
				c.queue.Add(k)
			}
		}
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopEvents()
	klog.FromContext(ctx).Info("Starting the group snapshot controller", "workers", c.cfg.Workers)
	return c.runner.Run(ctx)
}

func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

func groupKey(obj any) string {
	if g, ok := unwrap(obj).(*groupv1.VolumeGroupSnapshot); ok {
		return g.Namespace + "/" + g.Name
	}
	return ""
}

// contentGroupKey wakes the group a group content names: its status is copied there, and its
// deletion releases the group's bound finalizer.
func contentGroupKey(obj any) string {
	if c, ok := unwrap(obj).(*groupv1.VolumeGroupSnapshotContent); ok && c.Spec.VolumeGroupSnapshotRef.Name != "" {
		return c.Spec.VolumeGroupSnapshotRef.Namespace + "/" + c.Spec.VolumeGroupSnapshotRef.Name
	}
	return ""
}

// memberGroupKey wakes the group that owns a member snapshot.
func memberGroupKey(obj any) string {
	if vs, ok := unwrap(obj).(*snapv1.VolumeSnapshot); ok {
		if g := snapshotter.GroupOwner(vs); g != "" {
			return vs.Namespace + "/" + g
		}
	}
	return ""
}
