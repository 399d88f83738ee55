package cli

import (
	"context"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/component/attacher"
	"github.com/kubevol/kubevol/internal/runtime/apicheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// attacherFeatureGates are external-attacher v4.12's gates; others are refused.
var attacherFeatureGates = map[string]sidecar.FeatureGate{
	"ReleaseLeaderElectionOnExit":    {Default: false, PreRelease: "Alpha"},
	"MutableCSINodeAllocatableCount": {Default: false, PreRelease: "Beta"},
}

type attacherOptions struct {
	sidecar       sidecar.Options
	reconcileSync time.Duration
	maxEntries    int
	defaultFSType string
	showVersion   bool
	maxLogLength  int
	automaxprocs  bool
}

func newAttacherCommand() *cobra.Command {
	o := &attacherOptions{}
	cmd := &cobra.Command{
		Use:   "attacher",
		Short: "CSI attacher: VolumeAttachments to ControllerPublish/Unpublish",
		Long: `attacher replaces kubernetes-csi/external-attacher: it takes the same flags, finalizers and
annotations, calls ControllerPublishVolume for each VolumeAttachment of its driver and records
the result in the VolumeAttachment status (attached, attachmentMetadata, attachError), and
ControllerUnpublishVolume once the VolumeAttachment is deleted. A driver without
PUBLISH_UNPUBLISH_VOLUME has its VolumeAttachments marked attached without a call. A driver
with LIST_VOLUMES_PUBLISHED_NODES is asked every --reconcile-sync which nodes its volumes
are published to, and an attached VolumeAttachment whose volume lost its node is published
again.`,
		RunE: runSidecar(&o.showVersion, o.validate, o.run),
	}
	f := cmd.Flags()
	// Upstream defaults, except the client QPS: external-attacher's 5/10 queue every status
	// update behind a token bucket; the apiserver's priority and fairness protects it instead.
	o.sidecar.AddFlags(f, sidecar.Defaults{Timeout: 15 * time.Second, WorkerThreads: 10, KubeAPIQPS: 200, KubeAPIBurst: 400,
		Resync: 10 * time.Minute, ResyncFlag: "resync"})
	// Attach and detach have a queue and a pool each here, where upstream shares one: the
	// flag sizes each pool, as external-provisioner's sizes its claim and volume pools.
	f.Lookup("worker-threads").Usage = "Number of worker threads for attach, and as many for detach, i.e. simultaneous ControllerPublish and simultaneous ControllerUnpublish calls."
	f.DurationVar(&o.reconcileSync, "reconcile-sync", time.Minute, "Interval of the VolumeAttachment reconciler: how often ListVolumes is compared with the attached VolumeAttachments (drivers with LIST_VOLUMES_PUBLISHED_NODES only).")
	f.IntVar(&o.maxEntries, "max-entries", 0, "Max entries per page of the reconciler's ListVolumes calls; 0 means no limit.")
	f.StringVar(&o.defaultFSType, "default-fstype", "", "Filesystem type for volumes whose PV names none.")
	f.BoolVar(&o.showVersion, "version", false, "Show version.")
	f.IntVar(&o.maxLogLength, "max-grpc-log-length", -1, "The maximum amount of characters logged for every gRPC response (-1: no limit).")
	f.BoolVar(&o.automaxprocs, "automaxprocs", false, "Set GOMAXPROCS from the container's CPU quota.")
	o.sidecar.AddFeatureGates(f, attacherFeatureGates)
	noEffect(f, "kubevol logs CSI requests and responses (at -v=5, secrets stripped) whole", "max-grpc-log-length")
	noEffect(f, reasonAutomaxprocs, "automaxprocs")
	return cmd
}

func (o *attacherOptions) validate() error {
	if err := o.sidecar.Validate(); err != nil {
		return flagError(err, sidecar.FlagNames("resync"))
	}
	if o.reconcileSync <= 0 {
		return usageErrorf("--reconcile-sync must be positive, got %s", o.reconcileSync)
	}
	if o.maxEntries < 0 || o.maxEntries > math.MaxInt32 {
		return usageErrorf("--max-entries must be between 0 and %d, got %d", math.MaxInt32, o.maxEntries)
	}
	warnGates(o.sidecar.FeatureGates, attacherFeatureGates, map[string]string{
		"MutableCSINodeAllocatableCount": "kubevol's attacher always writes errorCode (the driver's gRPC code) in attachError and detachError",
	})
	return nil
}

func (o *attacherOptions) run(ctx context.Context) error {
	sc, err := sidecar.Connect(ctx, "attacher", &o.sidecar)
	if err != nil {
		return err
	}
	defer sc.Close()
	if _, err := sc.CheckAPIs(ctx, "attacher", []apicheck.Resource{apicheck.PersistentVolumes, apicheck.VolumeAttachments}); err != nil {
		return err
	}
	ctrl, err := attacher.New(ctx, attacher.Config{
		ControllerConfig: sc.ControllerConfig(),
		DefaultFSType:    o.defaultFSType,
		ReconcileSync:    o.reconcileSync,
		MaxEntries:       int32(o.maxEntries),
	})
	if err != nil {
		return err
	}
	// The Lease name upstream derives from the driver, so both can share one election.
	return sc.Run(ctx, "external-attacher-leader-"+csiclient.SanitizeDriverName(sc.Driver), ctrl.Run)
}
