package snapshotter

import (
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
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
	// Distributed (upstream --enable-distributed-snapshotting) labels each dynamic content
	// LabelManagedBy=<node>, the node of its source volume, for per-node csi-snapshotters.
	Distributed bool
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
	// NodeName (upstream --node-deployment, from $NODE_NAME) makes the sidecar one of a
	// node's: it sees only the contents labelled LabelManagedBy=NodeName.
	NodeName string
}

// Informers returns the informer factory of the sidecar's contents, the one of its classes
// and the controller.Sources that run them. With NodeName, the contents' factory lists only
// that node's contents, as upstream's per-node sidecar does (for group contents too); the
// classes are never filtered.
func (c *SidecarConfig) Informers() (contents, classes snapinformers.SharedInformerFactory, sources []controller.Source) {
	classes = snapinformers.NewSharedInformerFactory(c.Snap, c.Resync)
	if c.NodeName == "" {
		return classes, classes, []controller.Source{Informers(classes)}
	}
	selector := labels.Set{LabelManagedBy: c.NodeName}.AsSelector().String()
	contents = snapinformers.NewSharedInformerFactoryWithOptions(c.Snap, c.Resync,
		snapinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	return contents, classes, []controller.Source{Informers(contents), Informers(classes)}
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
