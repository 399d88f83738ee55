package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/bench/provision"
)

func newBenchProvisionCommand() *cobra.Command {
	cfg := provision.Config{}
	var upstream string
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "provisioning throughput and latency against a cluster",
		Long: `provision creates --count claims and measures the time from each claim to its PV and to
Bound, the throughput, and the provisioner's CPU seconds and peak RSS. Without --storage-class
it runs a kubevol driver and a kubevol provisioner for the run; with --precreate every claim
exists before the provisioner starts, so that the figure is the provisioning pipeline and not
the client's create rate. Then it runs upstream's external-provisioner (built from the Go module
proxy, or the binary --upstream names) on the same number of claims, with the same driver, client
limits and workers, and prints both rows and their ratio. Without --kubeconfig it uses the 'kubevol up' cluster if one runs,
else a throwaway local cluster. It writes provision.csv and provision.svg to --out-dir and
deletes everything it created.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Count < 1:
				return usageErrorf("--count must be at least 1, got %d", cfg.Count)
			case cfg.Timeout <= 0:
				return usageErrorf("--timeout must be positive")
			case cfg.StorageClass != "" && cfg.Precreate:
				return usageErrorf("--precreate needs the benchmark's own provisioner: it cannot be combined with --storage-class")
			case cfg.Driver != provision.DriverMemory && cfg.Driver != provision.DriverKubevol:
				return usageErrorf("--driver %q: want %s or %s", cfg.Driver, provision.DriverMemory, provision.DriverKubevol)
			case cfg.KubeAPIQPS <= 0 || cfg.KubeAPIBurst < 1:
				return usageErrorf("--kube-api-qps and --kube-api-burst must be positive")
			case cfg.StorageClass != "" && len(cfg.ProvisionerArgs) > 0:
				return usageErrorf("--provisioner-arg needs the benchmark's own provisioner: it cannot be combined with --storage-class")
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the kubevol binary: %w", err)
			}
			cfg.Binary, cfg.Out = bin, cmd.OutOrStdout()
			switch {
			case upstream == "none" || cfg.StorageClass != "":
			case upstream == "auto":
				if cfg.Upstream, cfg.UpstreamVersion, err = provision.BuildUpstream(cmd.Context(), cmd.ErrOrStderr()); err != nil {
					return err
				}
			default:
				cfg.Upstream, cfg.UpstreamVersion = upstream, provision.UpstreamVersion(upstream)
			}
			return provision.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Count, "count", 100, "number of claims")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "cluster to run against (default: the 'kubevol up' cluster, else a new local cluster)")
	f.StringVar(&cfg.StorageClass, "storage-class", "", "StorageClass to provision from (default: one served by a kubevol driver and provisioner started for the run)")
	f.StringVar(&cfg.Driver, "driver", provision.DriverMemory, "CSI driver of the benchmark's own provisioner: memory (CreateVolume costs nothing, the provisioner's figures) or kubevol (kubevol driver, real directories)")
	f.BoolVar(&cfg.Precreate, "precreate", false, "create all claims before starting the provisioner")
	f.StringVar(&cfg.OutDir, "out-dir", ".", "directory for provision.csv and provision.svg")
	f.Float64Var(&cfg.KubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS, "client QPS limit of both provisioners (kubevol's default; upstream's own 5 would measure its rate limiter)")
	f.IntVar(&cfg.KubeAPIBurst, "kube-api-burst", defaultKubeAPIBurst, "client burst limit of both provisioners")
	f.StringArrayVar(&cfg.ProvisionerArgs, "provisioner-arg", nil, "extra flag for the benchmark's provisioner, e.g. --provisioner-arg=--worker-threads=10 (repeatable)")
	f.StringVar(&upstream, "upstream", "auto", "upstream csi-provisioner to compare with: auto (build external-provisioner v6 from the Go module proxy, cached), a binary, or none")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up waiting for Bound after this long")
	return cmd
}
