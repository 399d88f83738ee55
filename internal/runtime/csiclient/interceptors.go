package csiclient

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/redact"
)

// Metrics is the csi_sidecar_operations_seconds histogram, named and labelled as the
// csi-lib-utils metrics manager names it, so existing dashboards keep working.
type Metrics struct {
	operations *prometheus.HistogramVec
}

// NewMetrics creates the metric and registers it with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{operations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "csi",
		Subsystem: "sidecar",
		Name:      "operations_seconds",
		Help:      "Container Storage Interface operation duration with gRPC error code status total",
		Buckets:   []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600},
	}, []string{"driver_name", "method_name", "grpc_status_code"})}
	if reg != nil {
		reg.MustRegister(m.operations)
	}
	return m
}

func (c *Conn) metricsInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if c.metrics != nil {
		c.mu.Lock()
		driver := c.driver
		c.mu.Unlock()
		if driver == "" {
			driver = "unknown-driver"
		}
		c.metrics.operations.WithLabelValues(driver, method, status.Code(err).String()).Observe(time.Since(start).Seconds())
	}
	return err
}

// logInterceptor logs each call at V(5) with secrets replaced by "***stripped***", as the
// upstream sidecars do, and the service-account tokens of volume_context too (redact.CSI);
// responses can be large, hence V(5) too.
func logInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	logger := klog.FromContext(ctx).V(5)
	if !logger.Enabled() {
		return invoker(ctx, method, req, reply, cc, opts...) // the common case costs nothing
	}
	logger = logger.WithValues("method", path.Base(method))
	logger.Info("GRPC call", "request", redact.CSI(req))
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		logger.Info("GRPC error", "err", err, "duration", time.Since(start))
	} else {
		logger.Info("GRPC response", "response", redact.CSI(reply), "duration", time.Since(start))
	}
	return err
}
