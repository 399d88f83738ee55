package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/resizer"
	"github.com/kubevol/kubevol/internal/sidecar"
)

type resizerOptions struct {
	sidecar        sidecar.Options
	resync         time.Duration
	handleInUseErr bool
	showVersion    bool
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
condition and, when the driver refuses for good, ControllerResizeInfeasible.`,
		RunE: runSidecar(&o.showVersion, o.validate, o.run),
	}
	f := cmd.Flags()
	// Upstream defaults, except the client QPS: external-resizer's 5/10 queue every status
	// update behind a token bucket; the apiserver's priority and fairness protects it instead.
	o.sidecar.AddFlags(f, sidecar.Defaults{Timeout: 10 * time.Second, WorkerThreads: 10, KubeAPIQPS: 200, KubeAPIBurst: 400})
	// external-resizer names its concurrency --workers; --worker-threads (the other sidecars'
	// name) stays accepted, hidden, and sets the same value.
	f.IntVar(&o.sidecar.WorkerThreads, "workers", 10, "Number of claims expanded at once.")
	_ = f.MarkHidden("worker-threads")
	f.DurationVar(&o.resync, "resync-period", 10*time.Minute, "Resync period of the informers: how often every claim is checked again.")
	f.BoolVar(&o.handleInUseErr, "handle-volume-inuse-error", true, "After the driver answers FAILED_PRECONDITION, do not ask it again while a pod uses the volume; expand it once no pod uses it.")
	f.BoolVar(&o.showVersion, "version", false, "Show version.")
	return cmd
}

func (o *resizerOptions) validate() error {
	if w := o.sidecar.WorkerThreads; w < 1 || w > 10000 {
		return usageErrorf("--workers must be between 1 and 10000, got %d", w)
	}
	if err := o.sidecar.Validate(); err != nil {
		return &UsageError{Err: err}
	}
	if o.resync <= 0 {
		return usageErrorf("--resync-period must be positive, got %s", o.resync)
	}
	return nil
}

func (o *resizerOptions) run(ctx context.Context) error {
	env, err := connectSidecar(ctx, &o.sidecar)
	if err != nil {
		return err
	}
	defer env.conn.Close()
	ctrl, err := resizer.New(ctx, resizer.Config{
		ControllerConfig:       env.controllerConfig(&o.sidecar, o.resync),
		HandleVolumeInUseError: o.handleInUseErr,
	})
	if err != nil {
		return err
	}
	return sidecar.Run(ctx, o.sidecar, env.client, env.reg, resizer.LeaseName(env.driver), ctrl.Run)
}
