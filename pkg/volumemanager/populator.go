package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/migration"
	"github.com/kubevol/kubevol/pkg/volume"
)

// populate brings the desired state of one pod up to date from the pod source and the
// object source (upstream: the desired state of world populator, without its 100 ms loop).
// A deleted, terminating or terminal pod wants nothing, so its volumes are torn down, and
// its objects are released.
func (m *Manager) populate(ctx context.Context, uid types.UID) {
	pod, deleted := m.records.object(uid)
	if pod == nil {
		m.trackObjects(uid, nil)
		m.forgetPod(uid)
		return
	}
	if !deleted {
		cur, err := m.pods.GetPod(pod.Namespace, pod.Name)
		switch {
		case err == nil && cur.UID == uid:
			pod = cur
		case err == nil || isNotFound(err):
			deleted = true
		}
	}
	lifecycle, runtime := m.pods.(PodLifecycle)
	wantsNothing := deleted || pod.DeletionTimestamp != nil || isTerminal(pod)
	if runtime {
		wantsNothing = lifecycle.RuntimeRemoved(uid)
	}
	if wantsNothing {
		if m.dsw.HasPod(uid) {
			klog.FromContext(ctx).V(2).Info("Pod no longer wants its volumes", "pod", klog.KObj(pod), "deleted", deleted,
				"terminating", pod.DeletionTimestamp != nil, "phase", pod.Status.Phase)
		}
		m.trackObjects(uid, nil)
		m.forgetPod(uid)
		return
	}
	if runtime && (deleted || lifecycle.ContainersTerminating(uid)) {
		return // keeps what it has until its containers are gone, and wants nothing new
	}
	m.trackObjects(uid, pod)
	volumes, failures := m.desiredVolumes(ctx, pod)
	m.dsw.setPod(pod, volumes, failures)
}

// forgetPod drops the pod from the desired state. The devices of the volumes it wanted are
// looked at now: one the pod never mounted (its SetUp failed after the device was staged)
// has no pod unmount to wake it, and would wait for the next resync.
func (m *Manager) forgetPod(uid types.UID) {
	for _, name := range m.dsw.deletePod(uid) {
		m.deviceQueue.Add(name)
	}
}

// pvcProtectionFinalizer is kube-controller-manager's finalizer on a claim that pods use.
const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

func isTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// usedVolumes are the pod volumes some container mounts or maps: the others are never set
// up, as upstream ("Skipping unused volume").
func usedVolumes(pod *v1.Pod) (mounts, devices map[string]bool) {
	mounts, devices = map[string]bool{}, map[string]bool{}
	forEachContainer(pod, func(c *v1.Container) {
		for _, vm := range c.VolumeMounts {
			mounts[vm.Name] = true
		}
		for _, vd := range c.VolumeDevices {
			devices[vd.Name] = true
		}
	})
	return mounts, devices
}

// forEachContainer calls f with every init, regular and ephemeral container of pod.
func forEachContainer(pod *v1.Pod, f func(*v1.Container)) {
	for i := range pod.Spec.InitContainers {
		f(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		f(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		f(&c)
	}
}

// desiredVolumes resolves the volumes the pod's containers use, and says why the others
// could not be.
func (m *Manager) desiredVolumes(ctx context.Context, pod *v1.Pod) ([]DesiredVolume, []volumeFailure) {
	mounts, devices := usedVolumes(pod)
	seLinuxOpts := containerSELinuxOptions(pod)
	var out []DesiredVolume
	var failures []volumeFailure
	fail := func(outer string, format string, args ...any) {
		failures = append(failures, volumeFailure{outer: outer, message: fmt.Sprintf(format, args...)})
	}
	index := map[v1.UniqueVolumeName]int{}
	for i := range pod.Spec.Volumes {
		pv := &pod.Spec.Volumes[i]
		if !mounts[pv.Name] && !devices[pv.Name] {
			continue
		}
		if mounts[pv.Name] && devices[pv.Name] {
			fail(pv.Name, "volume %q is used both in volumeMounts and in volumeDevices", pv.Name)
			continue
		}
		spec, claim, err := m.specFor(ctx, pod, pv, devices[pv.Name])
		if err != nil {
			fail(pv.Name, "volume %q: %v", pv.Name, err)
			continue
		}
		name, plugin, deviceMountable, err := uniqueVolumeName(m.plugins, spec, pod.UID)
		if err != nil {
			fail(pv.Name, "volume %q: %v", pv.Name, err)
			continue
		}
		if j, ok := index[name]; ok {
			out[j].OuterNames = append(out[j].OuterNames, pv.Name)
			continue
		}
		sel, err := m.chooseSELinux(plugin, spec, seLinuxOpts[pv.Name], pod)
		if err == nil {
			err = m.seLinuxConflict(name, plugin.Name(), spec, pod.UID, sel)
		}
		if err != nil {
			fail(pv.Name, "volume %q: %v", pv.Name, err)
			continue
		}
		if sel.mount != "" && len(m.dsw.VolumeUsers(name)) == 0 {
			m.seLinuxMetrics.admitted.WithLabelValues(seLinuxPluginName(plugin.Name(), spec), seLinuxAccessMode(spec)).Inc()
		}
		attachable, err := m.plugins.FindAttachable(spec)
		if err != nil {
			fail(pv.Name, "volume %q: %v", pv.Name, err)
			continue
		}
		index[name] = len(out)
		out = append(out, DesiredVolume{
			Name: name, PluginName: plugin.Name(), Spec: spec, OuterNames: []string{pv.Name},
			Attachable: attachable != nil, DeviceMountable: deviceMountable, RequiresRemount: plugin.RequiresRemount(spec),
			Claim: claim, SELinuxLabel: sel.mount, seLinuxOriginal: sel.original,
		})
	}
	return out, failures
}

// specFor resolves a pod volume: a claim (or generic ephemeral volume) through PVC → PV,
// checked as upstream; an inline volume as is. block: the pod uses it in volumeDevices. The
// claim is returned for a writable PVC-backed volume, whose expansion the node finishes.
func (m *Manager) specFor(ctx context.Context, pod *v1.Pod, pv *v1.Volume, block bool) (*volume.Spec, *v1.PersistentVolumeClaim, error) {
	var claim string
	readOnly := false
	switch {
	case pv.PersistentVolumeClaim != nil:
		claim, readOnly = pv.PersistentVolumeClaim.ClaimName, pv.PersistentVolumeClaim.ReadOnly
	case pv.Ephemeral != nil:
		claim = pod.Name + "-" + pv.Name
	case block:
		return nil, nil, errors.New("only persistent volumes can be used in volumeDevices")
	case migration.IsInTreeVolume(pv):
		// An inline in-tree volume of a migrated plugin is mounted by the CSI plugin as its
		// translation, a PV named <driver>-<handle>, which names its pod directory, as the
		// kubelet's populator does (csimigration.TranslateInTreeSpecToCSI).
		csiPV, err := migration.VolumeToCSI(klog.FromContext(ctx), pv, pod.Namespace)
		if err != nil {
			return nil, nil, err
		}
		spec := volume.SpecFromPersistentVolume(csiPV, false)
		spec.Migrated = true
		return spec, nil, nil
	default:
		return volume.SpecFromVolume(pv), nil, nil
	}
	r, err := m.fetchClaim(ctx, pod.Namespace, claim, m.dsw.resolved(pod.UID, pv.Name), func(r resolvedClaim) error {
		pvc := r.pvc
		switch {
		case pv.Ephemeral != nil && !metav1.IsControlledBy(pvc, pod):
			return fmt.Errorf("PVC %s/%s was not created for pod %s (pod is not owner)", pod.Namespace, claim, pod.Name)
		case pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer):
			// Upstream refuses a claim being deleted only once nothing protects it: a
			// claim in use keeps kubernetes.io/pvc-protection until its pods are gone.
			return fmt.Errorf("PVC %s/%s is being deleted", pod.Namespace, claim)
		case pvc.Status.Phase != v1.ClaimBound:
			return fmt.Errorf("PVC %s/%s is not bound", pod.Namespace, claim)
		case pvc.Spec.VolumeName == "":
			return fmt.Errorf("PVC %s/%s has an empty spec.volumeName", pod.Namespace, claim)
		case r.pv != nil && (r.pv.Spec.ClaimRef == nil || r.pv.Spec.ClaimRef.UID != pvc.UID):
			return fmt.Errorf("PV %s is not bound to PVC %s/%s", r.pv.Name, pod.Namespace, claim)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	pvc, obj := r.pvc, r.pv
	migrated := migration.IsInTreePV(obj)
	if migrated {
		// An in-tree PV of a migrated plugin is mounted through its CSI translation, with
		// the kubelet's volume name, paths and attachment name.
		csiPV, err := migration.PVToCSI(klog.FromContext(ctx), obj)
		if err != nil {
			return nil, nil, err
		}
		obj = csiPV
	}
	spec := volume.SpecFromPersistentVolume(obj, readOnly)
	spec.Migrated = migrated
	// Upstream's volumeMode check: volumeMounts need Filesystem, volumeDevices need Block.
	switch {
	case spec.Block() && !block:
		return nil, nil, fmt.Errorf("PV %s has volumeMode Block but the pod mounts it as a filesystem (volumeMounts)", obj.Name)
	case !spec.Block() && block:
		return nil, nil, fmt.Errorf("PV %s has volumeMode Filesystem but the pod uses it as a block device (volumeDevices)", obj.Name)
	}
	if readOnly {
		return spec, nil, nil // upstream never expands a read-only volume
	}
	return spec, pvc, nil
}
