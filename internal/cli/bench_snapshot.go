package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/bench/snapshot"
)

func newBenchSnapshotCommand() *cobra.Command {
	cfg := snapshot.Config{}
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "VolumeSnapshot latency to readyToUse and throughput",
		Long: `snapshot creates --count VolumeSnapshots of one claim and measures the time from each
VolumeSnapshot's creation to readyToUse (snapshot-controller, csi-snapshotter and driver
together), p50/p90/p99 and the throughput. It runs against --kubeconfig, else the 'kubevol up'
cluster if one runs, else a throwaway 'kubevol up' stack; the cluster must run kubevol's
driver, provisioner and snapshotter. It writes snapshot.csv and snapshot.svg to --out-dir and
deletes everything it created.

With --group it creates --members claims instead and --count VolumeGroupSnapshots of them all
(the cluster's default group class), measures each group's time to readyToUse (all members
snapshotted at one point in time), and writes groupsnapshot.csv and groupsnapshot.svg.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Count < 1:
				return usageErrorf("--count must be at least 1, got %d", cfg.Count)
			case cfg.Timeout <= 0:
				return usageErrorf("--timeout must be positive")
			case cfg.Group && cfg.Members < 1:
				return usageErrorf("--members must be at least 1, got %d", cfg.Members)
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the kubevol binary: %w", err)
			}
			cfg.Binary, cfg.Out = bin, cmd.OutOrStdout()
			return snapshot.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Count, "count", 100, "number of VolumeSnapshots")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "cluster to run against (default: the 'kubevol up' cluster, else a throwaway 'kubevol up' stack)")
	f.StringVar(&cfg.OutDir, "out-dir", ".", "directory for snapshot.csv and snapshot.svg (groupsnapshot.* with --group)")
	f.BoolVar(&cfg.Group, "group", false, "measure VolumeGroupSnapshots of --members claims instead of VolumeSnapshots of one")
	f.IntVar(&cfg.Members, "members", 3, "with --group: number of claims in each group")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up waiting for readyToUse after this long")
	return cmd
}
