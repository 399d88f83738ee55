// Package csisnapshotter is kubevol's csi-snapshotter role (the sidecar of
// kubernetes-csi/external-snapshotter): it turns the VolumeSnapshotContents of its driver
// into CreateSnapshot, ListSnapshots and DeleteSnapshot calls and writes the contents'
// status. It never touches VolumeSnapshots: the snapshot-controller role does.
//
// Crash safety: a CreateSnapshot is made only for a content that carries the bound
// finalizer, and only after the being-created annotation is stored; the annotation goes
// once the snapshot handle is in the content's status, or the driver gave a final error. So
// a process killed at any point finds the content again, repeats CreateSnapshot under the
// same name (CSI makes it idempotent) and learns the handle, and a content whose snapshot
// was deleted meanwhile is released only after its backend snapshot is deleted.
package csisnapshotter

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Controller is the csi-snapshotter of one driver.
type Controller struct {
	cfg        Config
	runner     *controller.Runner
	contents   snaplisters.VolumeSnapshotContentLister
	classes    snaplisters.VolumeSnapshotClassLister
	queue      *controller.Queue[string]
	stopEvents func()
	recorder   record.EventRecorder
	// lists is whether the driver has LIST_SNAPSHOTS, to check pre-provisioned snapshots.
	lists bool
	// volumes serializes CreateSnapshot per source volume.
	volumes volumeLocks
}

// New builds the controller. It asks the driver for its capabilities once.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if err := cfg.Complete("csi-snapshotter"); err != nil {
		return nil, err
	}
	if cfg.NamePrefix == "" {
		cfg.NamePrefix = "snapshot"
	}
	caps, err := cfg.CSI.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	if !caps.Controller[csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT] {
		return nil, errNoSnapshots(cfg.DriverName)
	}
	contents, classes, sources := cfg.Informers()
	vsc := contents.Snapshot().V1().VolumeSnapshotContents()
	class := classes.Snapshot().V1().VolumeSnapshotClasses()
	rec, stop := cfg.NewEvents(ctx, "csi-snapshotter")
	c := &Controller{
		cfg: cfg, runner: controller.NewRunner("csi-snapshotter"), contents: vsc.Lister(), classes: class.Lister(),
		queue:      sidecar.NewQueue[string](&cfg.ControllerConfig, "csi-snapshotter-content"),
		stopEvents: stop,
		recorder:   rec,
		lists:      caps.Controller[csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS],
	}
	_ = class.Informer() // obtained before the source starts
	c.runner.AddSource(sources...)
	controller.Handle(c.runner, c.queue, cfg.Workers, c.syncContent)
	if _, err := vsc.Informer().AddEventHandler(contentFilter.Handler(c.queue)); err != nil {
		return nil, err
	}
	return c, nil
}

// contentFilter is the update filter of VolumeSnapshotContents. A finalizer change of a
// content being deleted passes too.
var contentFilter = contentwrite.Filter[*snapv1.VolumeSnapshotContent]{
	BoundFinalizer: snapshotter.FinalizerContentBound, BeingCreated: snapshotter.AnnBeingCreated,
	Ready: func(c *snapv1.VolumeSnapshotContent) bool {
		return c.Status != nil && ptr.Deref(c.Status.ReadyToUse, false)
	},
	Spec:                    func(c *snapv1.VolumeSnapshotContent) any { return c.Spec },
	FinalizersWhileDeleting: true,
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopEvents()
	klog.FromContext(ctx).Info("Starting csi-snapshotter", "driver", c.cfg.DriverName, "workers", c.cfg.Workers, "listSnapshots", c.lists)
	return c.runner.Run(ctx)
}
