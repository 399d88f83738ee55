package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/volume/removeall"
)

// retryTeardown is how soon a pod directory that could not be removed is tried again.
const retryTeardown = 5 * time.Second

// reconcilePod converges one pod: unmount what it no longer wants first, so a volume can
// move from a deleted pod to a new one, then mount what it wants, then report. It returns
// how soon the pod must be looked at again (0: when an event or an operation says so).
func (m *Manager) reconcilePod(ctx context.Context, uid types.UID) time.Duration {
	var after time.Duration
	for _, mv := range m.asw.PodVolumes(uid) {
		if !m.keepsMount(uid, mv.Name) {
			after = minPositive(after, m.startUnmount(ctx, mv))
		}
	}
	if pod := m.dsw.Pod(uid); pod != nil {
		now := time.Now()
		volumes := m.dsw.PodVolumes(uid)
		allMounted := true
		for _, dv := range volumes {
			mv, ok := m.asw.PodVolume(uid, dv.Name)
			if !ok || mv.State != VolumeMounted {
				allMounted = false
			}
			if ok && mv.State == VolumeMounted && !mv.RemountRequired {
				if av, ok := m.asw.Volume(dv.Name); ok {
					if size, grow := expansionTarget(dv, av); grow && m.asw.expandableOnline(dv.Name) {
						after = minPositive(after, m.startExpand(ctx, pod, dv, size))
					}
				}
				if mv.RefreshAt.IsZero() {
					continue
				}
				if d := mv.RefreshAt.Sub(now); d > 0 {
					after = minPositive(after, d)
					continue
				}
			}
			if dv.DeviceMountable && m.unmountStale(ctx, dv.Name) {
				continue // mounted once the other pods' unmounts are done
			}
			if err := m.checkSELinuxMount(dv); err != nil {
				// Mounted with the context of pods that are going away: their unmounts,
				// then the device's, make way for a mount with this pod's context.
				m.records.setOpError(uid, dv.Name, err.Error())
				m.deviceQueue.Add(dv.Name)
				continue
			}
			after = minPositive(after, m.startMount(ctx, pod, dv))
		}
		if allMounted && len(m.dsw.PodErrors(uid)) == 0 && !m.cfg.InKubelet {
			after = minPositive(after, m.ensureSubpaths(ctx, pod, volumes))
		}
	}
	return minPositive(after, m.updateStatus(ctx, uid))
}

// unmountStale starts the unmounts of a shared volume by pods that no longer want it and
// reports whether there were any: a volume moves from a deleted pod to a new one only after
// it is unmounted from the old one (upstream: the reconciler unmounts before it mounts).
func (m *Manager) unmountStale(ctx context.Context, name v1.UniqueVolumeName) bool {
	stale := false
	for _, mv := range m.asw.VolumePods(name) {
		if !m.keepsMount(mv.PodUID, name) {
			stale = true
			m.startUnmount(ctx, mv)
		}
	}
	return stale
}

// reconcileDevice unmounts the device of a volume no pod uses any more, or forgets it; also
// when pods still want it, but with another SELinux context than it is mounted with.
func (m *Manager) reconcileDevice(ctx context.Context, name v1.UniqueVolumeName) time.Duration {
	av, ok := m.asw.Volume(name)
	if !ok || m.asw.VolumeMountCount(name) > 0 || m.volumeWantedAsMounted(name) {
		return 0
	}
	if av.DeviceMountable && av.DeviceState != DeviceNotMounted {
		return m.startUnmountDevice(ctx, av)
	}
	m.asw.remove(name)
	if av.Attachable {
		m.volumesInUseChanged()
	}
	// Pods that want the volume with another SELinux context wait for this.
	for _, uid := range m.dsw.VolumeUsers(name) {
		m.podQueue.Add(uid)
	}
	return 0
}

// updateStatus tells the observer about readiness changes, and tears a pod that wants
// nothing down to its directory.
func (m *Manager) updateStatus(ctx context.Context, uid types.UID) time.Duration {
	logger := klog.FromContext(ctx)
	if pod := m.dsw.Pod(uid); pod != nil {
		m.reportHeld(ctx, pod)
		st := m.podStatus(uid)
		var prev podStatus
		var seen bool
		m.records.with(uid, func(r *podRecord) {
			prev, seen = r.status, r.reported
			r.status, r.reported = st, true
		})
		if seen && prev == st {
			return 0
		}
		switch {
		case st.ready:
			// A kubelet posts no such event (its containers' events tell): one write
			// less per pod start.
			if !m.cfg.InKubelet {
				m.recorder.Eventf(pod, v1.EventTypeNormal, "SuccessfulMountVolume", "MountVolume.SetUp succeeded for all %d volumes", len(m.dsw.PodVolumes(uid)))
			}
			logger.V(2).Info("Pod volumes ready", "pod", klog.KObj(pod))
			if m.cfg.Observer != nil {
				m.cfg.Observer.VolumesReady(pod)
			}
		case st.message != "" && st.message != prev.message:
			logger.Info("Pod volumes not ready", "pod", klog.KObj(pod), "reason", st.message)
			if len(m.dsw.PodErrors(uid)) > 0 && !m.cfg.InKubelet {
				// Operation failures have their own events; unresolvable volumes do not.
				m.recorder.Event(pod, v1.EventTypeWarning, "FailedMount", st.message)
			}
			if m.cfg.Observer != nil {
				m.cfg.Observer.VolumesFailed(pod, st.message)
			}
		}
		return 0
	}
	// A mount still running for the pod would land after the teardown: wait for it (its
	// completion enqueues the pod), so a pod is never reported gone with a volume up.
	if len(m.asw.PodVolumes(uid)) > 0 || m.exec.PodBusy(uid) {
		return 0
	}
	var pod *v1.Pod
	var deleted bool
	var reported tornDownState
	m.records.with(uid, func(r *podRecord) { pod, deleted, reported = r.pod, r.deleted, r.tornDown })
	if pod != nil && !deleted {
		// The pod source can be ahead of the event handlers: the deletion that made the
		// populator tear the pod down may not have reached the pod's record yet, and the observer
		// must see it to finish the deletion.
		if cur, err := m.pods.GetPod(pod.Namespace, pod.Name); err == nil && cur.UID == uid {
			pod = cur
		}
	}
	if err := m.removePodDir(ctx, uid); err != nil {
		logger.Error(err, "Cannot remove pod directory yet", "podUID", uid)
		return retryTeardown
	}
	// A terminal pod is reported once, and again when its deletion begins.
	want := tornDownAlive
	if pod != nil && (deleted || pod.DeletionTimestamp != nil) {
		want = tornDownDeleting
	}
	if pod != nil && reported < want {
		m.records.with(uid, func(r *podRecord) {
			r.tornDown = want
			r.status, r.reported = podStatus{}, false
		})
		logger.V(2).Info("Pod volumes torn down", "pod", klog.KObj(pod))
		if m.cfg.Observer != nil {
			m.cfg.Observer.VolumesTornDown(pod)
		}
	}
	if pod == nil || deleted {
		m.records.forget(uid)
	}
	return 0
}

// reportHeld tells, once per distinct message, that volumes the pod keeps could not be read
// again: they stay as they were, and the pod stays as ready as it was.
func (m *Manager) reportHeld(ctx context.Context, pod *v1.Pod) {
	msg := strings.Join(m.dsw.heldErrors(pod.UID), "; ")
	changed := false
	m.records.with(pod.UID, func(r *podRecord) {
		changed, r.heldMessage = r.heldMessage != msg, msg
	})
	if !changed || msg == "" {
		return
	}
	klog.FromContext(ctx).Info("Volumes kept as they were: reading them again failed", "pod", klog.KObj(pod), "reason", msg)
	m.recorder.Event(pod, v1.EventTypeWarning, volumeRefreshFailed, "Volumes kept as they were: "+msg)
}

// volumeRefreshFailed is the reason of the event that reportHeld posts.
const volumeRefreshFailed = "VolumeRefreshFailed"

func (m *Manager) podStatus(uid types.UID) podStatus {
	var unmounted []string
	var notMounted []v1.UniqueVolumeName
	for _, dv := range m.dsw.PodVolumes(uid) {
		if mv, ok := m.asw.PodVolume(uid, dv.Name); !ok || mv.State != VolumeMounted {
			unmounted = append(unmounted, dv.OuterNames...)
			notMounted = append(notMounted, dv.Name)
		}
	}
	errs := m.podErrors(uid, notMounted)
	if len(unmounted) == 0 && len(errs) == 0 {
		return podStatus{ready: true}
	}
	if len(errs) == 0 {
		return podStatus{}
	}
	sort.Strings(unmounted)
	return podStatus{message: fmt.Sprintf("Unable to attach or mount volumes: unmounted volumes=[%s]: %s",
		strings.Join(unmounted, " "), strings.Join(errs, "; "))}
}

// removePodDir removes <root>/pods/<uid> once nothing of it is mounted. Volume directories
// left behind without an actual-state entry (a failed reconstruction) are torn down by
// their plugin first; a remaining mount point stops the removal, so no mounted data is
// ever deleted (upstream: cleanupOrphanedPodDirs).
func (m *Manager) removePodDir(ctx context.Context, uid types.UID) error {
	dir := m.cfg.Paths.PodDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, e := range m.podVolumesOnDisk(uid) {
		u, err := m.newUnmounter(e.plugin, e.name, uid, e.block)
		if err != nil {
			return fmt.Errorf("volume %s left in pod directory: %w", e.path, err)
		}
		if err := u.TearDown(ctx); err != nil {
			return fmt.Errorf("tear down leftover volume %s: %w", e.name, err)
		}
		_ = os.Remove(e.path)
	}
	if err := m.cleanSubpaths(uid, ""); err != nil {
		return err
	}
	if m.cfg.InKubelet {
		// The kubelet removes the directories of the pods it no longer has, once it finds
		// nothing mounted below them: reading the whole mount table here again, for every
		// pod, would cost a node with many pods dearly.
		return nil
	}
	mps, err := m.mountsBelow(dir)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("%s is still mounted", mps[0])
	}
	// The check above reads the mount table once; removeall also stops at a mount it
	// missed or that appeared since (upstream: RemoveAllOneFilesystem).
	return removeall.All(dir)
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
