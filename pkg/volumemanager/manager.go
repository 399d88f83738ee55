package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
)

// Observer is told about pods' volumes. Calls come from worker goroutines and must not
// block for long.
type Observer interface {
	// VolumesReady: every volume the pod's containers use is mounted.
	VolumesReady(pod *v1.Pod)
	// VolumesFailed: a volume could not be resolved or set up; message says why. Called
	// again only when the message changes.
	VolumesFailed(pod *v1.Pod, message string)
	// VolumesTornDown: the pod is deleted or terminal, all its volumes are torn down and
	// its directory is gone.
	VolumesTornDown(pod *v1.Pod)
}

// Config configures a Manager. Client, NodeName, Paths and Plugins are required.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	Paths    volume.Paths
	// Plugins are registered with the manager's PluginManager.
	Plugins []volume.Plugin
	// Mounter defaults to volume.NewMounter().
	Mounter mount.Interface
	// Recorder receives pod events (FailedMount, SuccessfulMountVolume); nil drops them.
	Recorder record.EventRecorder
	// Registerer receives the metrics; nil skips them.
	Registerer prometheus.Registerer
	Observer   Observer
	// NodeAllocatable feeds emptyDir sizing and the downward API; nil means unknown.
	NodeAllocatable func() v1.ResourceList
	// ResyncPeriod is the safety net that re-reconciles everything; default 10 minutes.
	ResyncPeriod time.Duration
	// OperationTimeout bounds each operation; default 2 minutes (upstream's CSI timeout).
	OperationTimeout time.Duration
	// Workers reconcile pods in parallel; default 4. Parallelism bounds the operations
	// running at once; default 32.
	Workers     int
	Parallelism int
	// VolumesInUseChanged, if set, is called when VolumesInUse may have changed and an
	// attachable volume waits for node.status.volumesInUse to list it.
	VolumesInUseChanged func()
}

// Manager is the volume manager of one node.
type Manager struct {
	cfg      Config
	plugins  *volume.PluginManager
	dsw      *DesiredState
	asw      *ActualState
	exec     *Executor
	metrics  *metrics
	mounter  mount.Interface
	recorder record.EventRecorder

	podQueue    workqueue.TypedRateLimitingInterface[types.UID]
	deviceQueue workqueue.TypedRateLimitingInterface[v1.UniqueVolumeName]

	factory     informers.SharedInformerFactory
	podFactory  informers.SharedInformerFactory
	podLister   corelisters.PodLister
	pvcLister   corelisters.PersistentVolumeClaimLister
	pvLister    corelisters.PersistentVolumeLister
	cmLister    corelisters.ConfigMapLister
	secLister   corelisters.SecretLister
	synced      []cache.InformerSynced
	initialized chan struct{}

	// records is what the manager knows about each pod beyond the two states.
	records *podRecords
}

// New builds a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("volumemanager: Config.Client is required")
	case cfg.NodeName == "":
		return nil, errors.New("volumemanager: Config.NodeName is required")
	case cfg.Paths.Root == "":
		return nil, errors.New("volumemanager: Config.Paths.Root is required")
	}
	if cfg.Mounter == nil {
		cfg.Mounter = volume.NewMounter()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = &record.FakeRecorder{}
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 10 * time.Minute
	}
	if cfg.OperationTimeout <= 0 {
		cfg.OperationTimeout = 2 * time.Minute
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = 32
	}
	m := &Manager{
		cfg: cfg, dsw: NewDesiredState(), asw: NewActualState(), mounter: cfg.Mounter, recorder: cfg.Recorder,
		initialized: make(chan struct{}), records: newPodRecords(),
	}
	m.metrics = newMetrics(cfg.Registerer, m.dsw, m.asw)
	m.exec = NewExecutor(cfg.OperationTimeout, cfg.Parallelism, m.metrics)
	m.podQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "volumemanager_pods"})
	m.deviceQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[v1.UniqueVolumeName](),
		workqueue.TypedRateLimitingQueueConfig[v1.UniqueVolumeName]{Name: "volumemanager_devices"})

	// Informers, not live GETs, so a dense node is not throttled (upstream #112209). The
	// resync is ours (ResyncPeriod), so the informers' is off. managedFields are never read,
	// and on cluster-wide ConfigMaps and Secrets they are much of the cache.
	strip := informers.WithTransform(stripManagedFields)
	m.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, strip)
	m.podFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, strip,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	podInf := m.podFactory.Core().V1().Pods()
	pvcInf := m.factory.Core().V1().PersistentVolumeClaims()
	pvInf := m.factory.Core().V1().PersistentVolumes()
	cmInf := m.factory.Core().V1().ConfigMaps()
	secInf := m.factory.Core().V1().Secrets()
	m.podLister, m.pvcLister, m.pvLister = podInf.Lister(), pvcInf.Lister(), pvInf.Lister()
	m.cmLister, m.secLister = cmInf.Lister(), secInf.Lister()
	m.synced = []cache.InformerSynced{podInf.Informer().HasSynced, pvcInf.Informer().HasSynced,
		pvInf.Informer().HasSynced, cmInf.Informer().HasSynced, secInf.Informer().HasSynced}
	if err := m.addHandlers(podInf.Informer(), pvcInf.Informer(), pvInf.Informer(), cmInf.Informer(), secInf.Informer()); err != nil {
		return nil, err
	}

	m.plugins = volume.NewPluginManager(volume.HostConfig{
		Paths: cfg.Paths, NodeName: cfg.NodeName, Mounter: cfg.Mounter, KubeClient: cfg.Client, Recorder: cfg.Recorder,
		ConfigMapGetter: func(ns, name string) (*v1.ConfigMap, error) { return m.cmLister.ConfigMaps(ns).Get(name) },
		SecretGetter:    func(ns, name string) (*v1.Secret, error) { return m.secLister.Secrets(ns).Get(name) },
		TokenGetter: func(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return cfg.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
		},
		TrustBundleGetter:   m.clusterTrustBundle,
		NodeAllocatableFunc: cfg.NodeAllocatable,
	})
	if err := m.plugins.Register(cfg.Plugins...); err != nil {
		return nil, err
	}
	return m, nil
}

// Plugins is the manager's plugin manager.
func (m *Manager) Plugins() *volume.PluginManager { return m.plugins }

// DesiredState and ActualState expose the caches, read-only by convention.
func (m *Manager) DesiredState() *DesiredState { return m.dsw }

// ActualState is the actual state of world.
func (m *Manager) ActualState() *ActualState { return m.asw }

// Initialized is closed once the initial desired state is populated and the actual state
// reconstructed: only then does the manager unmount anything.
func (m *Manager) Initialized() <-chan struct{} { return m.initialized }

// Run starts the informers, reconstructs the actual state from disk, populates the desired
// state, then reconciles until ctx ends. It waits for running operations before returning.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	defer m.podQueue.ShutDown()
	defer m.deviceQueue.ShutDown()
	m.factory.Start(ctx.Done())
	m.podFactory.Start(ctx.Done())
	defer m.factory.Shutdown()
	defer m.podFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), m.synced...) {
		return fmt.Errorf("volumemanager: caches did not sync: %w", ctx.Err())
	}
	start := time.Now()
	onDisk := m.reconstruct(ctx)
	// The first pass is synchronous so that nothing is unmounted before every pod's wishes
	// are known (upstream gates unmounts on the populator's hasAddedPods).
	pods, err := m.podLister.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, pod := range pods {
		m.records.note(pod, false)
		m.populate(ctx, pod.UID)
	}
	close(m.initialized)
	logger.Info("Volume manager initialized", "pods", len(pods), "reconstructedPods", len(onDisk), "duration", time.Since(start))
	m.enqueueAll(onDisk)

	var wg sync.WaitGroup
	for i := 0; i < m.cfg.Workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); m.runPodWorker(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); m.runDeviceWorker(ctx) }()

	ticker := time.NewTicker(m.cfg.ResyncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			m.podQueue.ShutDown()
			m.deviceQueue.ShutDown()
			wg.Wait()
			m.exec.Wait()
			return nil
		case <-ticker.C:
			m.enqueueAll(nil)
		}
	}
}

// enqueueAll is the resync: every pod known to the desired state, the actual state or the
// disk, and every volume no pod uses.
func (m *Manager) enqueueAll(extra []types.UID) {
	seen := map[types.UID]bool{}
	for _, list := range [][]types.UID{m.dsw.PodUIDs(), m.asw.PodUIDs(), extra, m.records.uids()} {
		for _, uid := range list {
			if !seen[uid] {
				seen[uid] = true
				m.podQueue.Add(uid)
			}
		}
	}
	for _, av := range m.asw.UnusedVolumes() {
		m.deviceQueue.Add(av.Name)
	}
}

func (m *Manager) runPodWorker(ctx context.Context) {
	for {
		uid, quit := m.podQueue.Get()
		if quit {
			return
		}
		m.populate(ctx, uid)
		if after := m.reconcilePod(ctx, uid); after > 0 {
			m.podQueue.AddAfter(uid, after)
		}
		m.podQueue.Forget(uid)
		m.podQueue.Done(uid)
	}
}

func (m *Manager) runDeviceWorker(ctx context.Context) {
	for {
		name, quit := m.deviceQueue.Get()
		if quit {
			return
		}
		if after := m.reconcileDevice(ctx, name); after > 0 {
			m.deviceQueue.AddAfter(name, after)
		}
		m.deviceQueue.Forget(name)
		m.deviceQueue.Done(name)
	}
}

// VolumesInUse is what node.status.volumesInUse must list: attachable volumes wanted or
// still present (upstream GetVolumesInUse).
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	set := map[v1.UniqueVolumeName]bool{}
	for _, n := range m.dsw.AttachableVolumes() {
		set[n] = true
	}
	for _, n := range m.asw.AttachableVolumes() {
		set[n] = true
	}
	return sortedNames(set)
}

// MarkVolumesReportedInUse records node.status.volumesInUse after the node status update,
// which lets mounts of those attachable volumes proceed.
func (m *Manager) MarkVolumesReportedInUse(names []v1.UniqueVolumeName) {
	m.dsw.MarkReportedInUse(names)
	for _, uid := range m.dsw.PodUIDs() {
		m.podQueue.Add(uid)
	}
}

func (m *Manager) volumesInUseChanged() {
	if m.cfg.VolumesInUseChanged != nil {
		m.cfg.VolumesInUseChanged()
	}
}

// PodVolumesReady reports whether every volume the pod uses is mounted.
func (m *Manager) PodVolumesReady(uid types.UID) (ready bool) {
	m.records.with(uid, func(r *podRecord) { ready = r.status.ready })
	return ready
}

// PodHasPossiblyMountedVolumes reports whether any volume of the pod is mounted or
// uncertain.
func (m *Manager) PodHasPossiblyMountedVolumes(uid types.UID) bool {
	return len(m.asw.PodVolumes(uid)) > 0
}

func (m *Manager) clusterTrustBundle(ctx context.Context, src v1.ClusterTrustBundleProjection) (string, error) {
	return fetchClusterTrustBundle(ctx, m.cfg.Client, src)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// stripManagedFields is an informer transform that drops metadata.managedFields.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}
