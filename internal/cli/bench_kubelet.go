package cli

import (
	"time"

	"github.com/spf13/cobra"

	benchkubelet "github.com/kubevol/kubevol/internal/bench/kubelet"
	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
)

func newBenchKubeletCommand() *cobra.Command {
	cfg := benchkubelet.Config{}
	cmd := &cobra.Command{
		Use:   "kubelet",
		Short: "the kubelet with its own volume manager and with kubevol's, side by side",
		Long: `kubelet starts a throwaway 'kubevol up --runtime containerd' stack for each volume manager of
the same kubelet binary (the kubelet's own, then kubevol's; as root: it runs containers and
mounts volumes) and runs the cases of Kubernetes' perf-tests storage pod-startup suite on its
one node: --pods pods with one configMap, secret, downwardAPI, emptyDir or PV each, one pod
with --volumes configMaps, one pod with --volumes PVs, each measured from pod creation to
Running. Then, on --pods pods with all five volume kinds, it samples the kubelet's CPU and RSS
for --idle, updates each pod's ConfigMap and measures until every container read the new
content. It prints both rows and the ratios, and writes kubelet.{csv,svg} to --out-dir.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Pods < 1 || cfg.Pods > 500:
				return usageErrorf("--pods must be between 1 and 500, got %d", cfg.Pods)
			case cfg.Volumes < 1 || cfg.Volumes > 500:
				return usageErrorf("--volumes must be between 1 and 500, got %d", cfg.Volumes)
			case cfg.Idle < time.Second:
				return usageErrorf("--idle must be at least 1s, got %s", cfg.Idle)
			case cfg.Timeout <= 0:
				return usageErrorf("--timeout must be positive, got %s", cfg.Timeout)
			}
			for _, m := range cfg.Managers {
				if m != kubeletnode.VolumeManagerKubelet && m != kubeletnode.VolumeManagerKubevol {
					return usageErrorf("--volume-managers: unknown %q: want %s or %s", m, kubeletnode.VolumeManagerKubelet, kubeletnode.VolumeManagerKubevol)
				}
			}
			cfg.Out = cmd.OutOrStdout()
			return benchkubelet.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Pods, "pods", 100, "pods of the many-pods cases and of the update and idle measurement")
	f.IntVar(&cfg.Volumes, "volumes", 100, "volumes of the one-pod cases")
	f.StringSliceVar(&cfg.Managers, "volume-managers", []string{kubeletnode.VolumeManagerKubelet, kubeletnode.VolumeManagerKubevol}, "the volume managers to run, in order; the ratio column is the first over the second")
	f.DurationVar(&cfg.Idle, "idle", time.Minute, "how long the kubelet's CPU is sampled at idle")
	f.BoolVar(&cfg.Startup, "startup", true, "run the pod-startup cases")
	f.BoolVar(&cfg.Update, "update", true, "run the ConfigMap update and idle measurement")
	f.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "give up on a case after this long")
	f.StringVar(&cfg.ClusterBinary, "cluster-binary", "", "kubevol-cluster binary (default: build or find it, as kubevol up)")
	f.StringVar(&cfg.OutDir, "out-dir", ".", "directory for the CSV and SVG files")
	return cmd
}
