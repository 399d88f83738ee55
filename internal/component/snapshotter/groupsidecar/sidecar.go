// Package groupsidecar is the group half of kubevol's csi-snapshotter role (the sidecar of
// kubernetes-csi/external-snapshotter for VolumeGroupSnapshotContents): it turns the group
// contents of its driver into CreateVolumeGroupSnapshot, GetVolumeGroupSnapshot and
// DeleteVolumeGroupSnapshot calls of the CSI GroupController service and writes the contents'
// status. It never touches VolumeGroupSnapshots or member objects.
//
// Crash safety is the single snapshots' (package creation runs both): a group snapshot is taken
// only for a content that carries the bound finalizer and only after the being-created
// annotation is stored; the annotation goes once the handle is in the status or the driver
// gave a final error, and a released content is let go only after its backend group is
// deleted.
package groupsidecar

import (
	"context"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	grouplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumegroupsnapshot/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/component/snapshotter/csisnapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Config configures a Controller.
type Config = csisnapshotter.Config

// Controller is the group csi-snapshotter of one driver.
type Controller struct {
	cfg        Config
	runner     *controller.Runner
	contents   grouplisters.VolumeGroupSnapshotContentLister
	classes    grouplisters.VolumeGroupSnapshotClassLister
	queue      *controller.Queue[string]
	stopEvents func()
	recorder   record.EventRecorder
}

// Supported reports whether the driver serves the GroupController with group snapshots
// (plugin capability GROUP_CONTROLLER_SERVICE and CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT),
// as upstream checks before it starts the group controller.
func Supported(ctx context.Context, cfg sidecar.ControllerConfig) (bool, error) {
	caps, err := cfg.CSI.Capabilities(ctx)
	if err != nil {
		return false, err
	}
	if !caps.Plugin[csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE] {
		return false, nil
	}
	cctx, cancel := cfg.CSI.WithTimeout(ctx)
	defer cancel()
	rsp, err := cfg.CSI.Group.GroupControllerGetCapabilities(cctx, &csi.GroupControllerGetCapabilitiesRequest{})
	if err != nil {
		return false, fmt.Errorf("GroupControllerGetCapabilities: %w", err)
	}
	return slices.ContainsFunc(rsp.GetCapabilities(), func(c *csi.GroupControllerServiceCapability) bool {
		return c.GetRpc().GetType() == csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
	}), nil
}

// New builds the controller.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if err := cfg.Complete("csi-snapshotter"); err != nil {
		return nil, err
	}
	if cfg.NamePrefix == "" {
		cfg.NamePrefix = "groupsnapshot"
	}
	contents, classes, sources := cfg.Informers()
	vgsc := contents.Groupsnapshot().V1().VolumeGroupSnapshotContents()
	class := classes.Groupsnapshot().V1().VolumeGroupSnapshotClasses()
	rec, stop := cfg.NewEvents(ctx, "csi-snapshotter")
	c := &Controller{
		cfg: cfg, runner: controller.NewRunner("csi-snapshotter-group"), contents: vgsc.Lister(), classes: class.Lister(),
		queue:      sidecar.NewQueue[string](&cfg.ControllerConfig, "csi-snapshotter-groupcontent"),
		stopEvents: stop,
		recorder:   rec,
	}
	_ = class.Informer()
	c.runner.AddSource(sources...)
	controller.Handle(c.runner, c.queue, cfg.Workers, c.syncContent)
	if _, err := vgsc.Informer().AddEventHandler(contentFilter.Handler(c.queue)); err != nil {
		return nil, err
	}
	return c, nil
}

// contentFilter is the update filter of VolumeGroupSnapshotContents.
var contentFilter = contentwrite.Filter[*groupv1.VolumeGroupSnapshotContent]{
	BoundFinalizer: snapshotter.FinalizerGroupContentBound, BeingCreated: snapshotter.AnnGroupBeingCreated,
	Ready: func(c *groupv1.VolumeGroupSnapshotContent) bool {
		return c.Status != nil && ptr.Deref(c.Status.ReadyToUse, false)
	},
	Spec: func(c *groupv1.VolumeGroupSnapshotContent) any { return c.Spec },
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopEvents()
	klog.FromContext(ctx).Info("Starting the group csi-snapshotter", "driver", c.cfg.DriverName, "workers", c.cfg.Workers)
	return c.runner.Run(ctx)
}
