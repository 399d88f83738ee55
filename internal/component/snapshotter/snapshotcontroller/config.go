package snapshotcontroller

import (
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// RoleConfig is the configuration both halves of the snapshot-controller share
// (upstream runs them in one binary with one set of flags).
type RoleConfig struct {
	Client kubernetes.Interface
	Snap   snapclient.Interface
	// Workers is upstream --worker-threads.
	Workers int
	// RetryIntervalStart and RetryIntervalMax bound each object's backoff.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Resync is upstream --resync-period.
	Resync time.Duration
	// PreventVolumeModeConversion records the source volume mode on new contents.
	PreventVolumeModeConversion bool
	// Distributed (upstream --enable-distributed-snapshotting) labels each dynamic content
	// LabelManagedBy=<node>, the node of its source volume, for per-node csi-snapshotters.
	Distributed bool
	// QueueMetrics exports the workqueue_* metrics; nil for none.
	QueueMetrics *controller.QueueMetrics
	// Metrics are the operation metrics both halves record into; nil for unregistered ones.
	Metrics *opmetrics.Metrics
}

// Complete fills in upstream's defaults, the sidecars'.
func (c *RoleConfig) Complete() {
	sidecar.WorkerDefaults(&c.Workers, &c.RetryIntervalStart, &c.RetryIntervalMax)
	if c.Metrics == nil {
		c.Metrics = opmetrics.New(nil)
	}
}

// NewQueue returns a queue of object keys that back off between RetryIntervalStart and
// RetryIntervalMax.
func (c *RoleConfig) NewQueue(name string) *controller.Queue[string] {
	qc := controller.QueueConfig{RetryIntervalStart: c.RetryIntervalStart, RetryIntervalMax: c.RetryIntervalMax}
	if c.QueueMetrics != nil { // a typed nil would be a provider that panics
		qc.Metrics = c.QueueMetrics
	}
	return controller.NewQueue[string](name, qc)
}
