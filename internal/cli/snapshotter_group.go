package cli

import (
	"context"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/snapshotter/groupcontroller"
	"github.com/kubevol/kubevol/internal/snapshotter/groupsidecar"
)

// groupsEnabled is the CSIVolumeGroupSnapshot gate: GA upstream, on unless turned off.
func (o *snapshotterOptions) groupsEnabled() bool {
	return o.sidecar.FeatureGates["CSIVolumeGroupSnapshot"]
}

// groupCRDsServed reports whether the groupsnapshot.storage.k8s.io/v1 CRDs are served. As
// upstream, their absence is a warning, not an error: the controller then runs without groups.
func groupCRDsServed(ctx context.Context, snap snapclient.Interface) bool {
	_, err := snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		klog.FromContext(ctx).Info("WARNING: the groupsnapshot.storage.k8s.io/v1 CRDs are not served; group snapshots are off (install them: `kubevol up` does)", "err", err)
		return false
	}
	return true
}

// withGroupController adds the group half to the snapshot-controller role's Run.
func (o *snapshotterOptions) withGroupController(ctx context.Context, run func(context.Context) error, cfg groupcontroller.Config) (func(context.Context) error, error) {
	if !o.groupsEnabled() || !groupCRDsServed(ctx, cfg.Snap) {
		return run, nil
	}
	g, err := groupcontroller.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return both(run, g.Run), nil
}

// withGroupSidecar adds the group half to the csi-snapshotter role's Run when the driver
// serves the GroupController, as upstream.
func (o *snapshotterOptions) withGroupSidecar(ctx context.Context, run func(context.Context) error, cfg groupsidecar.Config) (func(context.Context) error, error) {
	if !o.groupsEnabled() {
		return run, nil
	}
	ok, err := groupsidecar.Supported(ctx, cfg.ControllerConfig)
	if err != nil {
		return nil, err
	}
	if !ok {
		klog.FromContext(ctx).Info("The driver has no GroupController service: no group snapshots", "driver", cfg.DriverName)
		return run, nil
	}
	g, err := groupsidecar.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return both(run, g.Run), nil
}

// both runs a and b under one Lease; the first to end ends the other.
func both(a, b func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 2)
		go func() { errc <- a(ctx) }()
		go func() { errc <- b(ctx) }()
		err := <-errc
		cancel()
		if err2 := <-errc; err == nil {
			err = err2
		}
		return err
	}
}
