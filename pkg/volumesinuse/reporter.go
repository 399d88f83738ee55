// Package volumesinuse keeps node.status.volumesInUse current for a node's volume manager,
// as the kubelet's node status does. The attach/detach controller detaches no volume that
// this list names, and a node must mount an attachable volume only once the API server has
// accepted it in the list; so the Reporter writes the manager's VolumesInUse at once when it
// changes (and every Interval as a safety net) and tells the manager what the API server
// returned (upstream MarkVolumesAsReportedInUse).
//
// Nothing is written before the manager is initialized: a restarted node would otherwise
// empty the list while volumes are still mounted (upstream waits for
// ReconcilerStatesHasBeenSynced).
//
// Only status.volumesInUse is patched, so the Reporter runs beside whatever else writes the
// Node's status (a kubelet's or a runtime's heartbeat).
package volumesinuse

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// Source is the volume manager whose volumes are reported; *volumemanager.Manager is one.
type Source interface {
	// Initialized is closed once the manager knows every volume in use.
	Initialized() <-chan struct{}
	// VolumesInUse lists the attachable volumes wanted or still mounted.
	VolumesInUse() []v1.UniqueVolumeName
	// MarkVolumesReportedInUse receives what the API server accepted.
	MarkVolumesReportedInUse(names []v1.UniqueVolumeName)
}

// Config configures a Reporter. Client and NodeName are required.
type Config struct {
	// Client patches nodes/status of NodeName.
	Client   kubernetes.Interface
	NodeName string
	// Interval is how often the list is written when nothing changes; default one minute.
	// A failed write is retried sooner, with exponential backoff from 500 ms.
	Interval time.Duration
}

// Reporter writes a Source's volumes in use to its Node's status.
type Reporter struct {
	cfg     Config
	changed chan struct{}
}

// New validates cfg and returns a Reporter; Run starts it.
func New(cfg Config) (*Reporter, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("volumesinuse: Config.Client is required")
	case cfg.NodeName == "":
		return nil, errors.New("volumesinuse: Config.NodeName is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	return &Reporter{cfg: cfg, changed: make(chan struct{}, 1)}, nil
}

// Notify asks for a write as soon as possible; it never blocks. It is meant for
// volumemanager.Config.VolumesInUseChanged.
func (r *Reporter) Notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Run reports src's volumes until ctx ends.
func (r *Reporter) Run(ctx context.Context, src Source) {
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", r.cfg.NodeName))
	select {
	case <-src.Initialized():
	case <-ctx.Done():
		return
	}
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	backoff := workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, r.cfg.Interval)
	var reported []v1.UniqueVolumeName
	var retry <-chan time.Time
	for {
		inUse := src.VolumesInUse()
		accepted, err := r.write(ctx, inUse)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Updating node.status.volumesInUse failed, retrying")
			retry = time.After(backoff.When(""))
		default:
			backoff.Forget("")
			retry = nil
			// Only what the API server accepted counts as reported (upstream markVolumesFromNode).
			src.MarkVolumesReportedInUse(accepted)
			if !slices.Equal(reported, inUse) {
				logger.V(2).Info("Updated node.status.volumesInUse", "volumesInUse", inUse)
			}
			reported = inUse
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-r.changed:
		case <-retry:
		}
	}
}

// write patches status.volumesInUse alone; the list has no merge key, so the patch
// replaces it.
func (r *Reporter) write(ctx context.Context, inUse []v1.UniqueVolumeName) ([]v1.UniqueVolumeName, error) {
	if inUse == nil {
		inUse = []v1.UniqueVolumeName{}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": inUse}})
	if err != nil {
		return nil, err
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.NodeName}}
	node, err = write.Nodes(r.cfg.Client).SendStatusPatch(ctx, node, types.StrategicMergePatchType, patch)
	if err != nil {
		return nil, err
	}
	return node.Status.VolumesInUse, nil
}
