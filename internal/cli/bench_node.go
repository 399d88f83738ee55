package cli

import (
	"time"

	"github.com/spf13/cobra"

	benchnode "github.com/kubevol/kubevol/internal/bench/node"
)

func newBenchNodeCommand() *cobra.Command {
	cfg := benchnode.Config{}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "node volume manager: time to mount, update propagation, idle CPU",
		Long: `node runs the node agent in this process (as root: it mounts tmpfs) with its own Node, creates
--pods pods with --volumes volumes each (configMap, secret, emptyDir, downwardAPI, projected,
cycling), binds them all at once and measures per pod the time from binding to every volume
mounted; then updates the ConfigMap --updates times and measures when each pod's files change;
then the agent's idle CPU with everything mounted. With --unrelated N it first runs a 'kubevol node'
process for a node of its own, on the empty cluster and again once N Secrets and N ConfigMaps of
1 KiB exist that its pods do not reference, and reports its start-up time, peak RSS and the
watches it holds against the objects its pods reference. On a cluster it starts, the agents run
as system:node:<name>. Without --kubeconfig it uses the 'kubevol up'
cluster if one runs, else a throwaway local cluster. It writes node-mount.{csv,svg} and
node-propagation.{csv,svg} to --out-dir and deletes everything it created.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Pods < 1:
				return usageErrorf("--pods must be at least 1, got %d", cfg.Pods)
			case cfg.Pods > 100000:
				return usageErrorf("--pods must be at most 100000, got %d", cfg.Pods)
			case cfg.Volumes < 1 || cfg.Volumes > 100:
				return usageErrorf("--volumes must be between 1 and 100, got %d", cfg.Volumes)
			case cfg.Updates < 0:
				return usageErrorf("--updates must not be negative, got %d", cfg.Updates)
			case cfg.Idle < time.Second:
				return usageErrorf("--idle must be at least 1s, got %s", cfg.Idle)
			case cfg.Unrelated < 0 || cfg.Unrelated > 100000:
				return usageErrorf("--unrelated must be between 0 and 100000, got %d", cfg.Unrelated)
			case cfg.Timeout <= 0:
				return usageErrorf("--timeout must be positive")
			}
			cfg.Out = cmd.OutOrStdout()
			return benchnode.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Pods, "pods", 100, "number of pods")
	f.IntVar(&cfg.Volumes, "volumes", 5, "volumes per pod")
	f.IntVar(&cfg.Updates, "updates", 20, "ConfigMap updates whose propagation is measured (0 skips)")
	f.DurationVar(&cfg.Idle, "idle", 20*time.Second, "how long the idle CPU is measured")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "cluster to run against (default: the 'kubevol up' cluster, else a new local cluster)")
	f.StringVar(&cfg.OutDir, "out-dir", ".", "directory for the CSV and SVG files")
	f.IntVar(&cfg.Unrelated, "unrelated", 0, "also measure the agent process's start-up and peak RSS on the empty cluster and with this many unrelated Secrets and ConfigMaps (1 KiB each); 0 skips")
	f.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "give up waiting for mounts or an update after this long")
	return cmd
}
