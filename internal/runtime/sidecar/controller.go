package sidecar

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// ControllerConfig is the part of a controller's configuration that every sidecar's
// controllers share: the API client, the driver connection, and the standard worker, retry
// and resync flags of the kubernetes-csi sidecars.
type ControllerConfig struct {
	Client kubernetes.Interface
	// CSI is the connection to the driver's controller service.
	CSI *csiclient.Conn
	// DriverName is the driver's GetPluginInfo name; objects of other drivers are ignored.
	DriverName string
	// Workers is the number of objects handled at once (upstream --worker-threads, or
	// --workers in external-resizer).
	Workers int
	// RetryIntervalStart and RetryIntervalMax bound the per-object exponential backoff.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Resync is the informers' resync period: the safety net of level-triggered sync.
	Resync time.Duration
	// QueueMetrics receives the workqueue_* metrics of the controllers' queues; nil
	// exports none.
	QueueMetrics workqueue.MetricsProvider
}

// Complete checks the required fields and fills in the upstream defaults of the rest
// (10 workers, retries from 1s to 5m). component prefixes the error.
func (c *ControllerConfig) Complete(component string) error {
	if c.Client == nil || c.CSI == nil || c.DriverName == "" {
		return fmt.Errorf("%s: Client, CSI and DriverName are required", component)
	}
	WorkerDefaults(&c.Workers, &c.RetryIntervalStart, &c.RetryIntervalMax)
	return nil
}

// WorkerDefaults fills in the upstream defaults of the worker and retry settings left unset:
// 10 workers, retries from 1s to 5m.
func WorkerDefaults(workers *int, retryStart, retryMax *time.Duration) {
	if *workers <= 0 {
		*workers = 10
	}
	if *retryStart <= 0 {
		*retryStart = time.Second
	}
	if *retryMax < *retryStart {
		*retryMax = 5 * time.Minute
	}
}

// NewQueue returns a queue whose keys back off exponentially between RetryIntervalStart and
// RetryIntervalMax, as the upstream sidecars' queues do, with the workqueue metrics.
func NewQueue[K comparable](c *ControllerConfig, name string) *controller.Queue[K] {
	return controller.NewQueue[K](name, controller.QueueConfig{
		RetryIntervalStart: c.RetryIntervalStart, RetryIntervalMax: c.RetryIntervalMax, Metrics: c.QueueMetrics})
}

// NewEvents returns a recorder whose events have component followed by the driver name as
// their source, and the function that stops it.
func (c *ControllerConfig) NewEvents(ctx context.Context, component string) (record.EventRecorder, func()) {
	return controller.NewEventRecorder(ctx, c.Client, component+" "+c.DriverName)
}
