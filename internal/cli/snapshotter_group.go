package cli

import (
	"context"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/snapshotter/groupcontroller"
	"github.com/kubevol/kubevol/internal/component/snapshotter/groupsidecar"
	"github.com/kubevol/kubevol/internal/runtime/apicheck"
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

// groupFeature names group snapshots in the line of what is off.
const groupFeature = "group snapshots"

// checkAPIs waits, up to --retry-crd-interval-max as the snapshot-controller waits for its
// CRDs, for the snapshot API the csi-snapshotter cannot work without (contents and classes),
// then logs the one line of what is off: group snapshots without the
// groupsnapshot.storage.k8s.io/v1 CRDs. Discovery needs no permission beyond the default.
func (o *snapshotterOptions) checkAPIs(ctx context.Context, client kubernetes.Interface) (apicheck.Result, error) {
	var required []apicheck.Resource
	if o.sidecarRole {
		required = []apicheck.Resource{apicheck.VolumeSnapshotContents, apicheck.VolumeSnapshotClasses}
	}
	var features []apicheck.Feature
	if o.groupsEnabled() {
		features = []apicheck.Feature{{Name: groupFeature, Needs: []apicheck.Resource{
			apicheck.VolumeGroupSnapshots, apicheck.VolumeGroupSnapshotContents, apicheck.VolumeGroupSnapshotClasses}}}
	}
	var res apicheck.Result
	deadline := time.Now().Add(o.retryCRDMax)
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		var err error
		if res, err = apicheck.Check(client.Discovery(), "snapshotter", required, features); err == nil {
			return true, nil
		} else if time.Now().After(deadline) {
			return false, err
		}
		return false, nil
	})
	if err != nil {
		return res, err
	}
	klog.FromContext(ctx).Info(res.Line("snapshotter"))
	return res, nil
}

// withGroupController adds the group half to the snapshot-controller role's Run.
func (o *snapshotterOptions) withGroupController(ctx context.Context, on bool, run func(context.Context) error, cfg groupcontroller.Config) (func(context.Context) error, error) {
	if !on || !groupCRDsServed(ctx, cfg.Snap) {
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
func (o *snapshotterOptions) withGroupSidecar(ctx context.Context, on bool, run func(context.Context) error, cfg groupsidecar.Config) (func(context.Context) error, error) {
	if !on {
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
