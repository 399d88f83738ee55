package sidecar

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// Sidecar is a sidecar connected to the API server and to a driver that has answered its
// probe: what every kubernetes-csi sidecar has before it starts its controllers.
type Sidecar struct {
	Options *Options
	// RESTConfig has the client limits of the flags; copy it for a client of its own.
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// Registry is served on --http-endpoint: Go and process metrics, the CSI call metrics
	// and, through QueueMetrics, the workqueue_* metrics.
	Registry     *prometheus.Registry
	QueueMetrics *controller.QueueMetrics
	CSI          *csiclient.Conn
	// Driver is the driver's GetPluginInfo name.
	Driver string
	// leader renews the Lease on a budget of its own, so that a burst of object writes
	// never delays a renewal past the renew deadline.
	leader kubernetes.Interface
}

// Connect builds the API clients and the registry, dials the driver and waits until it
// answers its probe, then asks its name. component names the sidecar in the User-Agent.
// Close the returned Sidecar.
func Connect(ctx context.Context, component string, o *Options) (*Sidecar, error) {
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubevol-" + component
	// Compression costs CPU on both ends and saves nothing on the loopback or in-cluster
	// network a sidecar talks over.
	cfg.DisableCompression = true
	s := &Sidecar{Options: o, RESTConfig: cfg, Registry: prometheus.NewRegistry()}
	if s.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if s.leader, err = kubernetes.NewForConfig(rest.CopyConfig(cfg)); err != nil {
		return nil, err
	}
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.QueueMetrics = controller.NewQueueMetrics(s.Registry)
	if s.CSI, err = csiclient.Dial(csiclient.Config{Address: o.CSIAddress, Timeout: o.Timeout, Metrics: csiclient.NewMetrics(s.Registry)}); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Waiting for the CSI driver", "address", o.CSIAddress)
	if err := waitForDriver(ctx, s.CSI, o.CSIAddress); err != nil {
		s.CSI.Close()
		return nil, err
	}
	if s.Driver, err = s.CSI.DriverName(ctx); err != nil {
		s.CSI.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the driver connection.
func (s *Sidecar) Close() { s.CSI.Close() }

// ControllerConfig is the configuration the sidecar's controllers share, from the flags
// and the connection.
func (s *Sidecar) ControllerConfig() ControllerConfig {
	return ControllerConfig{
		Client:             s.Client,
		CSI:                s.CSI,
		DriverName:         s.Driver,
		Workers:            s.Options.WorkerThreads,
		RetryIntervalStart: s.Options.RetryIntervalStart,
		RetryIntervalMax:   s.Options.RetryIntervalMax,
		Resync:             s.Options.Resync,
		QueueMetrics:       s.QueueMetrics,
	}
}

// Run serves metrics and health and runs lead, under leader election on the Lease
// lockName when enabled; see Run.
func (s *Sidecar) Run(ctx context.Context, lockName string, lead func(context.Context) error) error {
	return Run(ctx, *s.Options, s.leader, s.Registry, lockName, lead)
}

// NewClient returns a client of its own with other limits, e.g. for writes that must not
// take the budget of the main client.
func (s *Sidecar) NewClient(qps float32, burst int) (kubernetes.Interface, error) {
	c := rest.CopyConfig(s.RESTConfig)
	c.QPS, c.Burst = qps, burst
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}
