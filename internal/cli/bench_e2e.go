package cli

import (
	"time"

	"github.com/spf13/cobra"

	benche2e "github.com/kubevol/kubevol/internal/bench/e2e"
)

func newBenchE2ECommand() *cobra.Command {
	cfg := benche2e.Config{}
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "the whole lifecycle: pods with a PVC each, from creation to volumes mounted",
		Long: `e2e starts a throwaway 'kubevol up' stack (control plane, driver, provisioner, attacher, node
agent; as root: it mounts volumes), creates --pods pods each with its own PVC of the default
StorageClass, and measures per pod the time from creation to the scheduler's node choice, the
PV, the binding, the pod's binding, NodeStage, NodePublish and the VolumesReady condition.
It prints p50/p99 per milestone and per phase, writes e2e.{csv,svg} to --out-dir, and
deletes everything.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Pods < 1 || cfg.Pods > 10000:
				return usageErrorf("--pods must be between 1 and 10000, got %d", cfg.Pods)
			case cfg.Timeout <= 0:
				return usageErrorf("--timeout must be positive, got %s", cfg.Timeout)
			}
			cfg.Out = cmd.OutOrStdout()
			return benche2e.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Pods, "pods", 100, "number of pods, each with its own PVC")
	f.StringVar(&cfg.ClusterBinary, "cluster-binary", "", "kubevol-cluster binary (default: build or find it, as kubevol up)")
	f.StringVar(&cfg.OutDir, "out-dir", ".", "directory for the CSV and SVG files")
	f.BoolVar(&cfg.AttachRequired, "attach-required", false, "run the driver with --attach-required and CSIDriver attachRequired: true, to measure the attach phase")
	f.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "give up waiting for the pods' volumes after this long")
	return cmd
}
