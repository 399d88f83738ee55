// Package controller is kubevol's snapshot-controller role (kubernetes-csi/external-snapshotter's
// "common controller"): it binds VolumeSnapshots to VolumeSnapshotContents, creates the
// contents of dynamic snapshots from their VolumeSnapshotClass, copies the contents' status
// into the snapshots, and owns the snapshot, content-bound and source-claim finalizers and
// the deletion of contents. It never calls CSI: the csi-snapshotter role does.
//
// One queue of VolumeSnapshot keys in the sample-controller shape; contents only wake up the
// snapshot they name.
package controller

import (
	"context"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/snapshotter"
)

// Component is the event source, as upstream names it.
const Component = "snapshot-controller"

// Config configures a Controller.
type Config struct {
	Client kubernetes.Interface
	Snap   snapclient.Interface
	// Workers is upstream --worker-threads.
	Workers int
	// RetryIntervalStart and RetryIntervalMax bound each snapshot's backoff.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Resync is upstream --resync-period.
	Resync time.Duration
	// PreventVolumeModeConversion records the source volume mode on new contents.
	PreventVolumeModeConversion bool
	// Registry receives the metrics; nil for none.
	Registry prometheus.Registerer
}

// Controller is the snapshot-controller.
type Controller struct {
	cfg       Config
	snapF     snapinformers.SharedInformerFactory
	coreF     informers.SharedInformerFactory
	snapshots snaplisters.VolumeSnapshotLister
	contents  snaplisters.VolumeSnapshotContentLister
	classes   snaplisters.VolumeSnapshotClassLister
	claims    corelisters.PersistentVolumeClaimLister
	volumes   corelisters.PersistentVolumeLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	events    record.EventBroadcaster
	recorder  record.EventRecorder
	metrics   *metrics
}

// New builds the controller and its informers.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 10
	}
	if cfg.RetryIntervalStart <= 0 {
		cfg.RetryIntervalStart = time.Second
	}
	if cfg.RetryIntervalMax < cfg.RetryIntervalStart {
		cfg.RetryIntervalMax = 5 * time.Minute
	}
	snapF := snapinformers.NewSharedInformerFactory(cfg.Snap, cfg.Resync)
	coreF := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	vs := snapF.Snapshot().V1().VolumeSnapshots()
	vsc := snapF.Snapshot().V1().VolumeSnapshotContents()
	class := snapF.Snapshot().V1().VolumeSnapshotClasses()
	pvc := coreF.Core().V1().PersistentVolumeClaims()
	pv := coreF.Core().V1().PersistentVolumes()
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(3)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	c := &Controller{
		cfg: cfg, snapF: snapF, coreF: coreF,
		snapshots: vs.Lister(), contents: vsc.Lister(), classes: class.Lister(),
		claims: pvc.Lister(), volumes: pv.Lister(),
		synced: []cache.InformerSynced{vs.Informer().HasSynced, vsc.Informer().HasSynced, class.Informer().HasSynced,
			pvc.Informer().HasSynced, pv.Informer().HasSynced},
		queue:    snapshotter.NewQueue("snapshot-controller-snapshot", cfg.RetryIntervalStart, cfg.RetryIntervalMax),
		events:   b,
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component}),
		metrics:  newMetrics(cfg.Registry),
	}
	if _, err := vs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.snapshotDeleted,
	}); err != nil {
		return nil, err
	}
	// A content wakes up the snapshot it names: its status is copied there, and its deletion
	// releases the snapshot's bound finalizer.
	if _, err := vsc.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueContent,
		UpdateFunc: func(_, obj any) { c.enqueueContent(obj) },
		DeleteFunc: c.enqueueContent,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts the informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer runtime.HandleCrashWithContext(ctx)
	defer c.events.Shutdown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting snapshot-controller", "workers", c.cfg.Workers)
	c.snapF.Start(ctx.Done())
	c.coreF.Start(ctx.Done())
	defer c.snapF.Shutdown()
	defer c.coreF.Shutdown()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return ctx.Err()
	}
	c.metrics.watchInFlight(ctx, c.snapshots)
	snapshotter.RunWorkers(ctx, c.queue, c.cfg.Workers, "volumesnapshot", c.syncSnapshot)
	logger.Info("Stopping snapshot-controller")
	return nil
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

func (c *Controller) snapshotDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Forget(key)
	}
}

func (c *Controller) enqueueContent(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	content, ok := obj.(*snapv1.VolumeSnapshotContent)
	if !ok || content.Spec.VolumeSnapshotRef.Name == "" {
		return
	}
	c.queue.Add(content.Spec.VolumeSnapshotRef.Namespace + "/" + content.Spec.VolumeSnapshotRef.Name)
}
