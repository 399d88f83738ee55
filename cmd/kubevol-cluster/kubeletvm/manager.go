package kubeletvm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/informers"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/container"
	kvm "k8s.io/kubernetes/pkg/kubelet/volumemanager"
	kvolume "k8s.io/kubernetes/pkg/volume"
	vtypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volume/plugins/projected"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

const (
	// waitTimeout bounds WaitForAttachAndMount and WaitForUnmount: the kubelet syncs the pod
	// again after it (upstream's podAttachAndMountTimeout).
	waitTimeout = 2*time.Minute + 3*time.Second
	// waitPoll is how often those waits look at the states besides when the manager tells
	// that a pod's volumes changed (upstream polls every 300 ms, which a container start
	// would wait out).
	waitPoll = time.Second
	// gidAnnotation is a PV's group ID that the pods using it get as a supplemental group.
	gidAnnotation = "pv.beta.kubernetes.io/gid"
)

// Manager is kubevol's volume manager as the kubelet's VolumeManager.
type Manager struct {
	args     kvm.Args
	m        *volumemanager.Manager
	pods     *podSource
	drivers  *drivers
	paths    volume.Paths
	informer informers.SharedInformerFactory

	// changed is closed, and replaced, whenever the manager reports a pod's volumes ready,
	// failed or torn down: the waits wake on it instead of polling.
	changedMu sync.Mutex
	changed   chan struct{}

	mu sync.Mutex
	// rejected holds the pods refused for a driver's attachment limit, with why.
	rejected map[types.UID]string
	// volumes caches what GetMountedVolumesForPod hands out per pod volume, so that metrics
	// caches (du) outlive one call.
	volumes map[volumeKey]container.VolumeInfo
	// allocatable is the Node's, read at most once a minute, under its own lock: the read
	// may wait on the API server.
	allocatableMu sync.Mutex
	allocatable   v1.ResourceList
	allocatableAt time.Time
}

type volumeKey struct {
	pod  types.UID
	name v1.UniqueVolumeName
}

var _ kvm.VolumeManager = (*Manager)(nil)

// New builds kubevol's volume manager from the kubelet's arguments. A kubelet that was
// asked for it and cannot run it stops with the reason, rather than run its own volume
// manager unnoticed: one without an API server (kubevol's needs one), or one that attaches
// volumes itself (kubevol's waits for the attach/detach controller).
func New(args kvm.Args) kvm.VolumeManager {
	logger := klog.Background()
	fail := func(err error, msg string) kvm.VolumeManager {
		logger.Error(err, msg)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		return nil
	}
	switch {
	case args.KubeClient == nil:
		return fail(nil, "Kubevol's volume manager needs an API server; unset "+Env+" to run the kubelet's own")
	case !args.ControllerAttachDetachEnabled:
		return fail(nil, "Kubevol's volume manager needs --enable-controller-attach-detach; unset "+Env+" to run the kubelet's own")
	}
	a := &Manager{
		args: args, pods: newPodSource(args.PodManager, args.PodStateProvider), drivers: newDrivers(),
		paths:    volume.Paths{Root: filepath.Dir(filepath.Clean(args.KubeletPodsDir))},
		informer: informers.NewSharedInformerFactory(args.KubeClient, 0),
		rejected: map[types.UID]string{}, volumes: map[volumeKey]container.VolumeInfo{}, changed: make(chan struct{}),
	}
	csi := csiplugin.New(csiplugin.Config{Drivers: a.drivers, CSIDrivers: a.informer.Storage().V1().CSIDrivers().Lister()})
	metrics := prometheus.NewRegistry()
	m, err := volumemanager.New(volumemanager.Config{
		Client:   args.KubeClient,
		NodeName: string(args.NodeName),
		Paths:    a.paths,
		Plugins:  append(a.inTreePlugins(), csi),
		Mounter:  args.Mounter,
		Recorder: args.Recorder,
		Observer: a,
		Pods:     a.pods,
		// Sizes memory-backed emptyDirs and fills the downward API's resource defaults.
		NodeAllocatable: a.nodeAllocatable,
		// What the kubelet's /metrics gets of these is bridged below.
		Registerer: metrics,
		InKubelet:  true,
	})
	if err != nil {
		return fail(err, "Kubevol's volume manager cannot start")
	}
	a.m = m
	legacyregistry.RawMustRegister(bridge{from: metrics})
	logger.Info("The kubelet runs kubevol's volume manager", "rootDir", a.paths.Root)
	return a
}

// inTreePlugins are kubevol's in-tree plugins; the projected plugin takes pod certificates
// from the kubelet's pod certificate manager, which files their PodCertificateRequests for
// every pod it runs: a second request of kubevol's would be a second certificate.
func (a *Manager) inTreePlugins() []volume.Plugin {
	all := plugins.All()
	host, ok := a.args.VolumePluginMgr.Host.(podCertificateHost)
	for i, p := range all {
		if p.Name() != projected.PluginName || !ok {
			continue
		}
		all[i] = projected.NewWithConfig(projected.Config{
			Credentials: func(ctx context.Context, pod *v1.Pod, volume string, index int) ([]byte, []byte, error) {
				return host.GetPodCertificateCredentialBundle(ctx, pod.Namespace, pod.Name, string(pod.UID), volume, index)
			},
		})
	}
	return all
}

// podCertificateHost is the kubelet's volume host, which serves the pod certificates its
// manager holds.
type podCertificateHost interface {
	GetPodCertificateCredentialBundle(ctx context.Context, namespace, podName, podUID, volumeName string, sourceIndex int) ([]byte, []byte, error)
}

// Run runs the volume manager until ctx ends.
func (a *Manager) Run(ctx context.Context, sourcesReady config.SourcesReady) {
	logger := klog.FromContext(ctx)
	// The kubelet's own CSI plugin still registers drivers and reads CSIDrivers through
	// its plugin manager's informer.
	go a.args.VolumePluginMgr.Run(ctx.Done())
	a.pods.setReady(sourcesReady.AllReady)
	a.informer.Start(ctx.Done())
	a.informer.WaitForCacheSync(ctx.Done())
	go a.forgetVolumes(ctx)
	logger.Info("Starting kubevol's volume manager")
	if err := a.m.Run(ctx); err != nil && ctx.Err() == nil {
		logger.Error(err, "Kubevol's volume manager stopped")
	}
	a.informer.Shutdown()
	a.drivers.close()
}

// WaitForAttachAndMount waits until every volume the pod's containers use is mounted, as
// the kubelet's does, and fails at once for volumes that cannot be resolved (a missing
// claim, ConfigMap or plugin), with the kubelet's text, which it posts as FailedMount.
func (a *Manager) WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error {
	if pod == nil || len(expectedVolumes(pod)) == 0 {
		return nil
	}
	a.m.Sync(pod.UID)
	err := a.wait(ctx, func() (bool, error) {
		if msg := a.rejection(pod.UID); msg != "" {
			return true, errors.New(msg)
		}
		if a.m.PodVolumesReady(pod.UID) {
			return true, nil
		}
		if errs := a.m.DesiredState().PodErrors(pod.UID); len(errs) > 0 {
			return true, errors.New(joinErrors(errs))
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	unmounted, unattached, notResolved := a.notReady(pod)
	if len(unmounted) == 0 {
		return nil
	}
	if msg := a.rejection(pod.UID); msg != "" {
		return &kvm.VolumeAttachLimitExceededError{UnmountedVolumes: unmounted, UnattachedVolumes: unattached,
			VolumesNotInDSW: notResolved, OriginalError: errors.New(msg)}
	}
	if errs := a.m.PodErrors(pod.UID); len(errs) > 0 && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%s: %w", joinErrors(errs), err)
	}
	return fmt.Errorf("unmounted volumes=%v, unattached volumes=%v, failed to process volumes=%v: %w", unmounted, unattached, notResolved, err)
}

// WaitForUnmount waits until nothing of the pod is mounted.
func (a *Manager) WaitForUnmount(ctx context.Context, pod *v1.Pod) error {
	if pod == nil {
		return nil
	}
	a.m.Sync(pod.UID)
	err := a.wait(ctx, func() (bool, error) { return len(a.m.ActualState().PodVolumes(pod.UID)) == 0, nil })
	if err == nil {
		return nil
	}
	var names []string
	for _, mv := range a.m.ActualState().PodVolumes(pod.UID) {
		names = append(names, string(mv.Name))
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	return fmt.Errorf("mounted volumes=%v: %w", names, err)
}

// WaitForAllPodsUnmount waits for every pod's volumes at once (graceful node shutdown).
func (a *Manager) WaitForAllPodsUnmount(ctx context.Context, pods []*v1.Pod) error {
	funcs := make([]func() error, 0, len(pods))
	for _, pod := range pods {
		funcs = append(funcs, func() error { return a.WaitForUnmount(ctx, pod) })
	}
	return utilerrors.AggregateGoroutines(funcs...)
}

func (a *Manager) wait(ctx context.Context, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		// Taken before the check, so that a change during it is not missed.
		changed := a.changes()
		if ok, err := done(); ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-t.C:
		}
	}
}

func (a *Manager) changes() <-chan struct{} {
	a.changedMu.Lock()
	defer a.changedMu.Unlock()
	return a.changed
}

// notify wakes the waits.
func (a *Manager) notify() {
	a.changedMu.Lock()
	defer a.changedMu.Unlock()
	close(a.changed)
	a.changed = make(chan struct{})
}

// notReady lists, by pod volume name, the volumes not mounted, those waiting for their
// attachment, and those not resolved at all, as the kubelet's error names them.
func (a *Manager) notReady(pod *v1.Pod) (unmounted, unattached, notResolved []string) {
	resolved := map[string]bool{}
	mounted := map[string]bool{}
	asw := a.m.ActualState()
	for _, dv := range a.m.DesiredState().PodVolumes(pod.UID) {
		mv, ok := asw.PodVolume(pod.UID, dv.Name)
		for _, outer := range dv.OuterNames {
			resolved[outer] = true
			mounted[outer] = ok && mv.State == volumemanager.VolumeMounted
			if dv.Attachable && !asw.IsAttached(dv.Name) {
				unattached = append(unattached, outer)
			}
		}
	}
	for _, name := range expectedVolumes(pod) {
		if !mounted[name] {
			unmounted = append(unmounted, name)
		}
		if !resolved[name] {
			notResolved = append(notResolved, name)
		}
	}
	slices.Sort(unmounted)
	slices.Sort(unattached)
	slices.Sort(notResolved)
	return unmounted, unattached, notResolved
}

// GetMountedVolumesForPod hands the kubelet each mounted volume of the pod, by pod volume
// name: where it is, read-only or not, its SELinux handling and its metrics.
func (a *Manager) GetMountedVolumesForPod(podName vtypes.UniquePodName) container.VolumeMap {
	uid := types.UID(podName)
	out := container.VolumeMap{}
	pod := a.m.DesiredState().Pod(uid)
	if pod == nil {
		return out
	}
	asw := a.m.ActualState()
	for _, dv := range a.m.DesiredState().PodVolumes(uid) {
		mv, ok := asw.PodVolume(uid, dv.Name)
		if !ok || mv.State != volumemanager.VolumeMounted {
			continue
		}
		info, ok := a.volumeInfo(pod, dv, mv)
		if !ok {
			continue
		}
		for _, outer := range dv.OuterNames {
			out[outer] = info
		}
	}
	return out
}

func (a *Manager) volumeInfo(pod *v1.Pod, dv volumemanager.DesiredVolume, mv volumemanager.MountedVolume) (container.VolumeInfo, bool) {
	key := volumeKey{pod.UID, dv.Name}
	a.mu.Lock()
	info, ok := a.volumes[key]
	a.mu.Unlock()
	if ok {
		return info, true
	}
	info = container.VolumeInfo{ReadOnly: dv.Spec.ReadOnly, InnerVolumeSpecName: dv.Spec.Name()}
	if mv.Block {
		info.BlockVolumeMapper = &mapped{link: mv.MountPath,
			MetricsProvider: metricsFor(dv.PluginName, dv.Spec, csiplugin.TargetPath(a.paths, pod.UID, mv.SpecName, true), a.drivers)}
	} else {
		plugin, err := a.m.Plugins().FindByName(dv.PluginName)
		if err != nil {
			return info, false
		}
		mounter, err := plugin.NewMounter(dv.Spec, pod)
		if err != nil {
			return info, false
		}
		path := mounter.Path()
		if path == "" {
			path = mv.MountPath
		}
		statsPath := path
		if dv.PluginName == csiplugin.PluginName {
			statsPath = csiplugin.TargetPath(a.paths, pod.UID, mv.SpecName, false)
		}
		attrs := mounter.Attributes()
		info.Mounter = &mounted{path: path,
			// A volume mounted with the pod's SELinux context needs no relabelling.
			attrs:           kvolume.Attributes{ReadOnly: attrs.ReadOnly, Managed: attrs.Managed, SELinuxRelabel: attrs.Managed && dv.SELinuxLabel == ""},
			MetricsProvider: metricsFor(dv.PluginName, dv.Spec, statsPath, a.drivers)}
	}
	a.mu.Lock()
	a.volumes[key] = info
	a.mu.Unlock()
	return info, true
}

// nodeAllocatable is the Node's allocatable resources, as the kubelet reports them.
func (a *Manager) nodeAllocatable() v1.ResourceList {
	a.allocatableMu.Lock()
	defer a.allocatableMu.Unlock()
	if a.allocatable != nil && time.Since(a.allocatableAt) < time.Minute {
		return a.allocatable
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node, err := a.args.KubeClient.CoreV1().Nodes().Get(ctx, string(a.args.NodeName), metav1.GetOptions{})
	if err != nil {
		return a.allocatable // the last known, or unknown
	}
	a.allocatable, a.allocatableAt = node.Status.Allocatable, time.Now()
	return a.allocatable
}

// forgetVolumes drops what GetMountedVolumesForPod cached for volumes no longer mounted.
func (a *Manager) forgetVolumes(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		for key := range a.volumes {
			if _, ok := a.m.ActualState().PodVolume(key.pod, key.name); !ok {
				delete(a.volumes, key)
			}
		}
		a.mu.Unlock()
	}
}

// HasPossiblyMountedVolumesForPod counts reconstructed and uncertain volumes, and says yes
// for every pod until the state is reconstructed after a start.
func (a *Manager) HasPossiblyMountedVolumesForPod(podName vtypes.UniquePodName) bool {
	return a.m.PodHasPossiblyMountedVolumes(types.UID(podName))
}

// GetExtraSupplementalGroupsForPod: the group IDs that the pod's mounted PVs carry in
// pv.beta.kubernetes.io/gid, except those the pod asks for already.
func (a *Manager) GetExtraSupplementalGroupsForPod(pod *v1.Pod) []int64 {
	var out []int64
	asw := a.m.ActualState()
	for _, mv := range asw.PodVolumes(pod.UID) {
		av, ok := asw.Volume(mv.Name)
		if mv.State != volumemanager.VolumeMounted || !ok || av.Spec == nil || av.Spec.PersistentVolume == nil {
			continue
		}
		gid, err := strconv.ParseInt(av.Spec.PersistentVolume.Annotations[gidAnnotation], 10, 64)
		if err != nil || slices.Contains(out, gid) {
			continue
		}
		if sc := pod.Spec.SecurityContext; sc != nil && slices.Contains(sc.SupplementalGroups, gid) {
			continue
		}
		out = append(out, gid)
	}
	return out
}

// GetVolumesInUse is node.status.volumesInUse.
func (a *Manager) GetVolumesInUse() []v1.UniqueVolumeName { return a.m.VolumesInUse() }

// ReconcilerStatesHasBeenSynced: the actual state was reconstructed and every pod's wishes
// are known.
func (a *Manager) ReconcilerStatesHasBeenSynced() bool {
	select {
	case <-a.m.Initialized():
		return true
	default:
		return false
	}
}

func (a *Manager) VolumeIsAttached(name v1.UniqueVolumeName) bool {
	return a.m.ActualState().IsAttached(name)
}

func (a *Manager) MarkVolumesAsReportedInUse(names []v1.UniqueVolumeName) {
	a.m.MarkVolumesReportedInUse(names)
}

// ResizeEphemeralVolume: kubevol sizes a memory-backed emptyDir when it mounts it; resizing
// one under a running pod is not implemented.
func (a *Manager) ResizeEphemeralVolume(pod *v1.Pod, volumeName string, _ *resource.Quantity) error {
	return fmt.Errorf("volume %s of pod %s does not support direct resizing", volumeName, klog.KObj(pod))
}

// VolumesReady, VolumesFailed and VolumesTornDown wake the waits, through which the kubelet
// learns them; its status manager writes the pod's status.
func (a *Manager) VolumesReady(*v1.Pod)          { a.notify() }
func (a *Manager) VolumesFailed(*v1.Pod, string) { a.notify() }
func (a *Manager) VolumesTornDown(pod *v1.Pod) {
	a.mu.Lock()
	delete(a.rejected, pod.UID)
	a.mu.Unlock()
	a.notify()
}

// RejectPod records a pod refused for a driver's attachment limit: WaitForAttachAndMount
// returns the kubelet's VolumeAttachLimitExceededError, and the kubelet fails the pod.
func (a *Manager) RejectPod(pod *v1.Pod, _, message string) {
	a.mu.Lock()
	a.rejected[pod.UID] = message
	a.mu.Unlock()
	a.notify()
}

func (a *Manager) rejection(uid types.UID) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rejected[uid]
}

// expectedVolumes are the pod volumes its containers mount or map.
func expectedVolumes(pod *v1.Pod) []string {
	var names []string
	add := func(cs []v1.Container) {
		for _, c := range cs {
			for _, m := range c.VolumeMounts {
				names = append(names, m.Name)
			}
			for _, d := range c.VolumeDevices {
				names = append(names, d.Name)
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	for _, e := range pod.Spec.EphemeralContainers {
		add([]v1.Container{v1.Container(e.EphemeralContainerCommon)})
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func joinErrors(errs []string) string { return strings.Join(errs, "; ") }
