package cli

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csi"
	"github.com/kubevol/kubevol/internal/sidecar"
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
