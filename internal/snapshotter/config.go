package snapshotter

import (
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/controller"
	"github.com/kubevol/kubevol/internal/sidecar"
	"github.com/kubevol/kubevol/internal/snapshotter/opmetrics"
)

// ControllerConfig is the configuration both halves of the snapshot-controller share
// (upstream runs them in one binary with one set of flags).
type ControllerConfig struct {
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
	// QueueMetrics exports the workqueue_* metrics; nil for none.
	QueueMetrics *controller.QueueMetrics
	// Metrics are the operation metrics both halves record into; nil for unregistered ones.
	Metrics *opmetrics.Metrics
}

// SidecarConfig configures either half of the csi-snapshotter.
type SidecarConfig struct {
	sidecar.ControllerConfig
	Snap snapclient.Interface
	// NamePrefix and UUIDLength name the backend snapshots: <prefix>-<UID of the
	// VolumeSnapshot or VolumeGroupSnapshot>. Upstream --snapshot-name-prefix and
	// --snapshot-name-uuid-length, or --groupsnapshot-name-prefix and
	// --groupsnapshot-name-uuid-length for groups.
	NamePrefix string
	UUIDLength int
	// ExtraCreateMetadata adds the names of the (group) snapshot and its content to the
	// parameters.
	ExtraCreateMetadata bool
}

// Complete fills in upstream's defaults, the sidecars'.
func (c *ControllerConfig) Complete() {
	sidecar.WorkerDefaults(&c.Workers, &c.RetryIntervalStart, &c.RetryIntervalMax)
	if c.Metrics == nil {
		c.Metrics = opmetrics.New(nil)
	}
}

// NewQueue returns a queue of object keys that back off between RetryIntervalStart and
// RetryIntervalMax.
func (c *ControllerConfig) NewQueue(name string) *controller.Queue[string] {
	qc := controller.QueueConfig{RetryIntervalStart: c.RetryIntervalStart, RetryIntervalMax: c.RetryIntervalMax}
	if c.QueueMetrics != nil { // a typed nil would be a provider that panics
		qc.Metrics = c.QueueMetrics
	}
	return controller.NewQueue[string](name, qc)
}
