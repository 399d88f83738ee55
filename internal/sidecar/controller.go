package sidecar

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubevol/kubevol/internal/csi"
)

// ControllerConfig is the part of a controller sidecar's configuration that the attacher and
// the resizer share: the API client, the driver connection, and the standard worker and
// retry flags of the kubernetes-csi sidecars.
type ControllerConfig struct {
	Client kubernetes.Interface
	// CSI is the connection to the driver's controller service.
	CSI *csi.Conn
	// DriverName is the driver's GetPluginInfo name; objects of other drivers are ignored.
	DriverName string
	// Workers is the number of objects handled at once (upstream --worker-threads, or
	// --workers in external-resizer).
	Workers int
	// RetryIntervalStart and RetryIntervalMax bound the per-object exponential backoff.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Resync is the informers' resync period: the safety net of level-triggered sync.
	Resync time.Duration
}

// Complete checks the required fields and fills in the upstream defaults of the rest
// (10 workers, retries from 1s to 5m). component prefixes the error.
func (c *ControllerConfig) Complete(component string) error {
	if c.Client == nil || c.CSI == nil || c.DriverName == "" {
		return fmt.Errorf("%s: Client, CSI and DriverName are required", component)
	}
	if c.Workers <= 0 {
		c.Workers = 10
	}
	if c.RetryIntervalStart <= 0 {
		c.RetryIntervalStart = time.Second
	}
	if c.RetryIntervalMax < c.RetryIntervalStart {
		c.RetryIntervalMax = 5 * time.Minute
	}
	return nil
}

// NewQueue returns a work queue whose items back off exponentially per item between
// RetryIntervalStart and RetryIntervalMax, as the upstream sidecars' queues do.
func (c *ControllerConfig) NewQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](c.RetryIntervalStart, c.RetryIntervalMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// NewEvents starts a broadcaster that logs events at level 3 and writes them to the API, and
// returns it with a recorder whose source is component followed by the driver name. The
// caller shuts the broadcaster down.
func (c *ControllerConfig) NewEvents(ctx context.Context, component string) (record.EventBroadcaster, record.EventRecorder) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(3)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	return b, b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component + " " + c.DriverName})
}
