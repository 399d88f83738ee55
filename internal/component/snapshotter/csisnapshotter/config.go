package csisnapshotter

import (
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Config configures either half of the csi-snapshotter either half of the csi-snapshotter.
type Config struct {
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
	// node's: it sees only the contents labelled snapshotter.LabelManagedBy=NodeName.
	NodeName string
}

// Informers returns the informer factory of the sidecar's contents, the one of its classes
// and the controller.Sources that run them. With NodeName, the contents' factory lists only
// that node's contents, as upstream's per-node sidecar does (for group contents too); the
// classes are never filtered.
func (c *Config) Informers() (contents, classes snapinformers.SharedInformerFactory, sources []controller.Source) {
	classes = snapinformers.NewSharedInformerFactory(c.Snap, c.Resync)
	if c.NodeName == "" {
		return classes, classes, []controller.Source{controller.ChanInformers(classes)}
	}
	selector := labels.Set{snapshotter.LabelManagedBy: c.NodeName}.AsSelector().String()
	contents = snapinformers.NewSharedInformerFactoryWithOptions(c.Snap, c.Resync,
		snapinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	return contents, classes, []controller.Source{controller.ChanInformers(contents), controller.ChanInformers(classes)}
}
