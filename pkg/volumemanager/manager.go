package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volumemanager/internal/executor"
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

// PodRejecter is an Observer that can also reject a pod, as the kubelet does when the node
// has reached a CSI driver's attachment limit: the pod's phase becomes Failed with reason
// (VolumeAttachmentLimitExceeded) and message.
type PodRejecter interface {
	RejectPod(pod *v1.Pod, reason, message string)
}

// VolumeAttachmentLimitExceededReason is the kubelet's reason for a pod rejected because
// the node has reached a CSI driver's attachment limit.
const VolumeAttachmentLimitExceededReason = "VolumeAttachmentLimitExceeded"

// Config configures a Manager. NodeName, Paths and Plugins are required, and Client unless
// both Objects and Pods are set.
type Config struct {
	// Client builds the default sources, requests service-account tokens, reads
	// ClusterTrustBundles, files PodCertificateRequests and writes claims' resize status. A node's own credential
	// (system:node:<name>) is enough; a broader one works as well.
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
	// NodeLabels returns the labels of the node, against which a PV's node affinity is
	// checked before it is mounted; default a GET of the Node through Client (without
	// Client, the check is skipped).
	NodeLabels func(ctx context.Context) (map[string]string, error)
	// SELinuxEnabled says whether the host runs SELinux, so that volumes are mounted with
	// the containers' SELinux context where the plugin supports it; default: detected
	// (selinuxfs at /sys/fs/selinux).
	SELinuxEnabled *bool
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
	// Objects is where the API objects that volumes refer to are read; default
	// NewAPIObjectSource(Client), which reads only what the node's pods reference.
	Objects ObjectSource
	// Pods delivers the node's pods; default NewAPIPodSource(Client, NodeName).
	Pods PodSource
	// InKubelet says the manager runs inside a kubelet (cmd/kubevol-cluster/kubeletvm),
	// which prepares each container's subPaths itself, posts the pod-level FailedMount
	// ("Unable to attach or mount volumes: ...") when its wait for the volumes fails, and
	// removes the directories of pods it no longer has: the manager then does none of these,
	// and posts no pod-level SuccessfulMountVolume either, as the kubelet's does not.
	// Pods should come from a PodSource that is a PodLifecycle.
	InKubelet bool
	// ClaimSyncPeriod is how often the claims and volumes of running pods are read again,
	// to learn that a volume grew (the kubelet reads them on every pod sync); default one
	// minute, the kubelet's --sync-frequency.
	ClaimSyncPeriod time.Duration
}

// Manager is the volume manager of one node.
type Manager struct {
	cfg      Config
	plugins  *volume.PluginManager
	dsw      *desiredState
	asw      *actualState
	exec     *executor.Executor
	metrics  *metrics
	mounter  mount.Interface
	recorder record.EventRecorder

	podQueue    *controller.Queue[types.UID]
	deviceQueue *controller.Queue[v1.UniqueVolumeName]

	pods        PodSource
	objects     ObjectSource
	claims      *claims
	unresolved  workqueue.TypedRateLimiter[types.UID]
	initialized chan struct{}

	seLinuxEnabled bool
	seLinuxMetrics *seLinuxMetrics

	// records is what the manager knows about each pod beyond the two states.
	records *podRecords
}

// New builds a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.Client == nil && (cfg.Objects == nil || cfg.Pods == nil):
		return nil, errors.New("volumemanager: Config.Client is required unless Config.Objects and Config.Pods are set")
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
	if cfg.ClaimSyncPeriod <= 0 {
		cfg.ClaimSyncPeriod = time.Minute
	}
	if cfg.Objects == nil {
		cfg.Objects = NewAPIObjectSource(cfg.Client)
	}
	if cfg.Pods == nil {
		cfg.Pods = NewAPIPodSource(cfg.Client, cfg.NodeName)
	}
	m := &Manager{
		cfg: cfg, dsw: newDesiredState(), asw: newActualState(), mounter: cfg.Mounter, recorder: cfg.Recorder,
		initialized: make(chan struct{}), records: newPodRecords(),
		pods: cfg.Pods, objects: cfg.Objects, claims: newClaims(), unresolved: newUnresolvedLimiter(),
	}
	m.metrics = newMetrics(cfg.Registerer, m.dsw, m.asw)
	m.seLinuxMetrics = newSELinuxMetrics(cfg.Registerer)
	m.seLinuxEnabled = seLinuxHostEnabled()
	if cfg.SELinuxEnabled != nil {
		m.seLinuxEnabled = *cfg.SELinuxEnabled
	}
	if w, ok := cfg.Objects.(objectWatcher); ok && cfg.Registerer != nil {
		cfg.Registerer.MustRegister(newWatchesCollector(w))
	}
	m.exec = executor.New(executor.Config{
		Timeout: cfg.OperationTimeout, Parallelism: cfg.Parallelism, MaxForbiddenBackoff: claimBackoff.max,
		Observe: func(op executor.Operation, err error, d time.Duration) {
			m.metrics.observeOperation(op.PluginName, op.Name, op.Migrated, err, d)
		},
	})
	// The workers never back a key off (each sync says when to look again), so the
	// queues' retry intervals are unused.
	var qcfg controller.QueueConfig
	if cfg.Registerer != nil {
		qcfg.Metrics = controller.NewQueueMetrics(cfg.Registerer)
	}
	m.podQueue = controller.NewQueue[types.UID]("volumemanager_pods", qcfg)
	m.deviceQueue = controller.NewQueue[v1.UniqueVolumeName]("volumemanager_devices", qcfg)

	if err := m.addPodHandler(m.pods); err != nil {
		return nil, err
	}

	m.plugins = volume.NewPluginManager(volume.HostConfig{
		Paths: cfg.Paths, NodeName: cfg.NodeName, Mounter: cfg.Mounter, KubeClient: cfg.Client, Recorder: cfg.Recorder,
		ConfigMapGetter: m.objects.GetConfigMap,
		SecretGetter:    m.objects.GetSecret,
		SecretFetcher: func(ctx context.Context, ns, name string) (*v1.Secret, error) {
			s, err := m.objects.FetchSecret(ctx, ns, name)
			return s, accessError(err)
		},
		AttachmentGetter: m.objects.GetVolumeAttachment,
		TokenGetter: func(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			if cfg.Client == nil {
				return nil, errors.New("no API client to request service account tokens")
			}
			// Refused for a moment after the pod is bound, like any read of the node's.
			out, err := cfg.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
			return out, accessError(err)
		},
		TrustBundleGetter:     m.clusterTrustBundle,
		PodCertificateCreator: m.createPodCertificateRequest,
		PodCertificateGetter:  m.getPodCertificateRequest,
		NodeAllocatableFunc:   cfg.NodeAllocatable,
	})
	if err := m.plugins.Register(cfg.Plugins...); err != nil {
		return nil, err
	}
	if c := newPodCertificateStates(cfg.Plugins); c != nil && cfg.Registerer != nil {
		cfg.Registerer.MustRegister(c)
	}
	return m, nil
}

// Plugins is the manager's plugin manager.
func (m *Manager) Plugins() *volume.PluginManager { return m.plugins }

// DesiredState is a read-only view of the desired state of world: which pod wants which
// volume. Its methods return copies; Pods returns all of it at one instant.
func (m *Manager) DesiredState() DesiredState { return m.dsw }

// ActualState is a read-only view of the actual state of world: what is attached,
// device-mounted and mounted for each pod, with paths, and what was reconstructed after a
// restart. Its methods return copies; Volumes returns all of it at one instant.
func (m *Manager) ActualState() ActualState { return m.asw }

// Initialized is closed once the initial desired state is populated and the actual state
// reconstructed: only then does the manager unmount anything.
func (m *Manager) Initialized() <-chan struct{} { return m.initialized }

// Run starts the informers, reconstructs the actual state from disk, populates the desired
// state, then reconciles until ctx ends. It waits for running operations before returning.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	defer m.podQueue.ShutDown()
	defer m.deviceQueue.ShutDown()
	m.objects.Start(ctx, m.objectChanged)
	m.pods.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), m.pods.HasSynced) {
		return fmt.Errorf("volumemanager: pods did not sync: %w", ctx.Err())
	}
	start := time.Now()
	onDisk := m.reconstruct(ctx)
	// The first pass is synchronous so that nothing is unmounted before every pod's wishes
	// are known (upstream gates unmounts on the populator's hasAddedPods).
	pods, err := m.pods.ListPods()
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

	// The queues are fed by hand (pod events, operations, resyncs): no source to wait for.
	r := controller.NewRunner("volumemanager")
	controller.Handle(r, m.podQueue, m.cfg.Workers, m.syncPod)
	controller.Handle(r, m.deviceQueue, 1, m.syncDevice)
	r.Every(m.cfg.ClaimSyncPeriod, afterFirstPeriod(m.syncClaims))
	r.Every(m.cfg.ResyncPeriod, afterFirstPeriod(func(context.Context) { m.enqueueAll(nil) }))
	err = r.Run(ctx)
	m.exec.Wait()
	return err
}

// afterFirstPeriod skips the first call of f, which Runner.Every makes at once: the state
// was just populated and queued in full, so the first resync is due one period later.
func afterFirstPeriod(f func(context.Context)) func(context.Context) {
	started := false
	return func(ctx context.Context) {
		if !started {
			started = true
			return
		}
		f(ctx)
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

// syncPod brings one pod's volumes to its desired state.
func (m *Manager) syncPod(ctx context.Context, uid types.UID) error {
	m.populate(ctx, uid)
	after := m.reconcilePod(ctx, uid)
	// Claims and volumes send no events: one not resolved yet is read again.
	after = minPositive(after, m.unresolvedRetry(uid, len(m.dsw.PodErrors(uid)) > 0 || m.resizeUnderWay(uid)))
	return retryAfter(after)
}

// syncDevice detaches or unmounts the device of one volume no pod uses.
func (m *Manager) syncDevice(ctx context.Context, name v1.UniqueVolumeName) error {
	return retryAfter(m.reconcileDevice(ctx, name))
}

// retryAfter is the result of a sync that wants its key again after d, if d > 0.
func retryAfter(d time.Duration) error {
	if d > 0 {
		return controller.RetryAfter(d)
	}
	return nil
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
	m.dsw.markReportedInUse(names)
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
// uncertain, reconstructed ones included; until the actual state is reconstructed after a
// start, any pod may have some.
func (m *Manager) PodHasPossiblyMountedVolumes(uid types.UID) bool {
	select {
	case <-m.initialized:
	default:
		return true
	}
	return len(m.asw.PodVolumes(uid)) > 0
}

// Sync asks for the pod's volumes to be reconciled now (upstream: ReprocessPod).
func (m *Manager) Sync(uid types.UID) { m.podQueue.Add(uid) }

// PodErrors says why volumes of the pod are not set up, if anything failed: volumes that
// cannot be resolved, and the last error of each volume not mounted yet.
func (m *Manager) PodErrors(uid types.UID) []string {
	var notMounted []v1.UniqueVolumeName
	for _, dv := range m.dsw.PodVolumes(uid) {
		if mv, ok := m.asw.PodVolume(uid, dv.Name); !ok || mv.State != VolumeMounted {
			notMounted = append(notMounted, dv.Name)
		}
	}
	return m.podErrors(uid, notMounted)
}

func (m *Manager) podErrors(uid types.UID, notMounted []v1.UniqueVolumeName) []string {
	errs := m.dsw.PodErrors(uid)
	m.records.with(uid, func(r *podRecord) {
		if r.subpathErr != "" {
			errs = append(errs, r.subpathErr)
		}
		for _, name := range notMounted {
			if e := r.opErrors[name]; e != "" {
				errs = append(errs, e)
			}
		}
	})
	return errs
}

func (m *Manager) clusterTrustBundle(ctx context.Context, src v1.ClusterTrustBundleProjection) (string, error) {
	if m.cfg.Client == nil {
		return "", errors.New("no API client to read ClusterTrustBundles")
	}
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
