package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csi"
	"github.com/kubevol/kubevol/internal/sidecar"
	"github.com/kubevol/kubevol/internal/version"
)

// sidecarEnv is what a controller sidecar (attacher, resizer) starts from: an API client, a
// metrics registry, and a connection to a CSI driver that has answered its probe.
type sidecarEnv struct {
	client kubernetes.Interface
	reg    *prometheus.Registry
	conn   *csi.Conn
	driver string
}

// connectSidecar builds the client and the registry and waits for the driver, as every
// kubernetes-csi sidecar does before it starts its controller. The caller closes env.conn.
func connectSidecar(ctx context.Context, o *sidecar.Options) (*sidecarEnv, error) {
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	conn, err := csi.Dial(csi.Config{Address: o.CSIAddress, Timeout: o.Timeout, Metrics: csi.NewMetrics(reg)})
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Waiting for the CSI driver", "address", o.CSIAddress)
	if err := conn.ProbeForever(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	driver, err := conn.DriverName(ctx)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &sidecarEnv{client: client, reg: reg, conn: conn, driver: driver}, nil
}

// controllerConfig is the part of a controller's configuration that comes from env and the
// standard sidecar flags; resync is each sidecar's own flag (--resync, --resync-period).
func (env *sidecarEnv) controllerConfig(o *sidecar.Options, resync time.Duration) sidecar.ControllerConfig {
	return sidecar.ControllerConfig{
		Client:             env.client,
		CSI:                env.conn,
		DriverName:         env.driver,
		Workers:            o.WorkerThreads,
		RetryIntervalStart: o.RetryIntervalStart,
		RetryIntervalMax:   o.RetryIntervalMax,
		Resync:             resync,
	}
}

// runSidecar is the RunE of a controller sidecar: --version prints the version and nothing
// else runs, as in the upstream sidecars; otherwise the flags are validated before run.
func runSidecar(showVersion *bool, validate func() error, run func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if *showVersion {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return err
		}
		if err := validate(); err != nil {
			return err
		}
		return run(cmd.Context())
	}
}
