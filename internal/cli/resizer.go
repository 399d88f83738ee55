package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kubevol/kubevol/internal/component/resizer"
	"github.com/kubevol/kubevol/internal/runtime/apicheck"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// resizerFeatureGates are external-resizer v2.1's gates; others are refused.
var resizerFeatureGates = map[string]sidecar.FeatureGate{
	"AnnotateFsResize":              {Default: false, PreRelease: "Alpha"},
	"RecoverVolumeExpansionFailure": {Default: true, PreRelease: "Beta"},
	"VolumeAttributesClass":         {Default: true, PreRelease: "GA"},
	"ReleaseLeaderElectionOnExit":   {Default: false, PreRelease: "Alpha"},
}

type resizerOptions struct {
	sidecar        sidecar.Options
	handleInUseErr bool
	extraModify    bool
	gates          *pflag.Flag // --feature-gates, to tell a gate set from its default
	showVersion    bool
	automaxprocs   bool
}

func newResizerCommand() *cobra.Command {
	o := &resizerOptions{}
	cmd := &cobra.Command{
		Use:   "resizer",
		Short: "CSI resizer: PVC storage requests to ControllerExpandVolume",
		Long: `resizer replaces kubernetes-csi/external-resizer: it takes the same flags, Lease and claim
status contract. When a bound claim of its driver asks for more storage than it has, it records
the size in status.allocatedResources, calls ControllerExpandVolume, grows the PV, and either
finishes the claim (status.capacity) or leaves it NodeResizePending with the condition
FileSystemResizePending for the node. A driver without EXPAND_VOLUME gets its PVs grown without
a call, as upstream's trivial resizer does. Failures are events, the ControllerResizeError
condition and, when the driver refuses for good, ControllerResizeInfeasible.

With a driver that has MODIFY_VOLUME (and the VolumeAttributesClass gate, on by default), a
bound claim's spec.volumeAttributesClassName becomes ControllerModifyVolume with the class's
parameters; status.modifyVolumeStatus says InProgress, Infeasible or Pending, and
status.currentVolumeAttributesClassName and the PV's class follow once the driver agrees.`,
		RunE: runSidecar(&o.showVersion, o.validate, o.run),
	}
	f := cmd.Flags()
	// Upstream defaults, except the client QPS: external-resizer's 5/10 queue every status
	// update behind a token bucket; the apiserver's priority and fairness protects it instead.
	o.sidecar.AddFlags(f, sidecar.Defaults{Timeout: 10 * time.Second, WorkerThreads: 10, KubeAPIQPS: 200, KubeAPIBurst: 400,
		Resync: 10 * time.Minute, ResyncFlag: "resync-period"})
	// external-resizer names its concurrency --workers; --worker-threads (the other sidecars'
	// name) stays accepted, hidden, and sets the same value.
	f.IntVar(&o.sidecar.WorkerThreads, "workers", 10, "Number of claims expanded at once.")
	_ = f.MarkHidden("worker-threads")
	f.BoolVar(&o.handleInUseErr, "handle-volume-inuse-error", true, "After the driver answers FAILED_PRECONDITION, do not ask it again while a pod uses the volume; expand it once no pod uses it.")
	f.BoolVar(&o.extraModify, "extra-modify-metadata", false, "Add the claim's name and namespace and the PV's name to the parameters of ControllerModifyVolume (csi.storage.k8s.io/pvc/name, pvc/namespace, pv/name).")
	f.BoolVar(&o.showVersion, "version", false, "Show version.")
	f.StringVar(&o.sidecar.Master, "master", "", "Master URL to build a client config from. Either this or kubeconfig needs to be set if the resizer is being run out of cluster.")
	f.BoolVar(&o.automaxprocs, "automaxprocs", false, "Set GOMAXPROCS from the container's CPU quota.")
	noEffect(f, reasonAutomaxprocs, "automaxprocs")
	o.sidecar.AddFeatureGates(f, resizerFeatureGates)
	o.gates = f.Lookup("feature-gates")
	return cmd
}

func (o *resizerOptions) validate() error {
	if err := o.sidecar.Validate(); err != nil {
		names := sidecar.FlagNames("resync-period")
		names["WorkerThreads"] = "--workers"
		return flagError(err, names)
	}
	warnGates(o.sidecar.FeatureGates, resizerFeatureGates, map[string]string{
		"RecoverVolumeExpansionFailure": "kubevol's resizer always records the expansion in status.allocatedResources, so that a failed one can be retried smaller",
	})
	return nil
}

func (o *resizerOptions) run(ctx context.Context) error {
	sc, err := sidecar.Connect(ctx, "resizer", &o.sidecar)
	if err != nil {
		return err
	}
	defer sc.Close()
	// As upstream: a gate left at its default follows what the apiserver serves (a class
	// informer on a missing API would never sync); one set to true needs the API.
	required := []apicheck.Resource{apicheck.PersistentVolumes, apicheck.PersistentVolumeClaims}
	var features []apicheck.Feature
	modify := o.sidecar.FeatureGates["VolumeAttributesClass"]
	if modify && strings.Contains(o.gates.Value.String(), "VolumeAttributesClass=") {
		required = append(required, apicheck.VolumeAttributesClasses)
	} else if modify {
		features = append(features, apicheck.Feature{Name: modifyFeature, Needs: []apicheck.Resource{apicheck.VolumeAttributesClasses}})
	}
	served, err := sc.CheckAPIs(ctx, "resizer", required, features...)
	if err != nil {
		return err
	}
	ctrl, err := resizer.New(ctx, resizer.Config{
		ControllerConfig:       sc.ControllerConfig(),
		HandleVolumeInUseError: o.handleInUseErr,
		AnnotateFsResize:       o.sidecar.FeatureGates["AnnotateFsResize"],
		Modify: resizer.ModifyConfig{
			Enabled:       modify && served.On(modifyFeature),
			ExtraMetadata: o.extraModify,
		},
	})
	if err != nil {
		return err
	}
	return sc.Run(ctx, resizer.LeaseName(sc.Driver), ctrl.Run)
}

// modifyFeature names ControllerModifyVolume through VolumeAttributesClasses in the line
// of what is off.
const modifyFeature = "modify (VolumeAttributesClass)"
