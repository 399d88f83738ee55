package volumemanager

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// MountState is the state of a volume for one pod.
type MountState string

// DeviceState is the state of a volume's global (device) mount.
type DeviceState string

// The string values are upstream's.
const (
	VolumeNotMounted     MountState  = "VolumeNotMounted"
	VolumeMounted        MountState  = "VolumeMounted"
	VolumeMountUncertain MountState  = "VolumeMountUncertain"
	DeviceNotMounted     DeviceState = "DeviceNotMounted"
	DeviceMounted        DeviceState = "DeviceGloballyMounted"
	DeviceMountUncertain DeviceState = "DeviceMountUncertain"
)

// MountedVolume is one volume of one pod in the actual state.
type MountedVolume struct {
	// Name is the unique volume name, as node.status.volumesInUse lists it.
	Name       v1.UniqueVolumeName
	PluginName string
	PodUID     types.UID
	// SpecName is the directory name under the pod's plugin directory.
	SpecName string
	// MountPath is what the pod's containers get: the directory the plugin set the volume
	// up in (the mounter's Path), or the pod's device link of a block volume. Empty when
	// the plugin has none (hostPath after a restart).
	MountPath string
	// Block: a block volume, mapped under the pod's volumeDevices directory.
	Block bool
	// State is VolumeMounted, or VolumeMountUncertain after a timeout, a failed teardown
	// or a restart.
	State MountState
	// RemountRequired: the contents changed (a ConfigMap update) and SetUp runs again.
	RemountRequired bool
	// Reconstructed: found on disk after a restart. A final SetUp error does not downgrade
	// it to not-mounted, so it is still torn down when no pod wants it.
	Reconstructed bool
	// RefreshAt, when set, is when the volume's contents expire (tokens).
	RefreshAt time.Time
	// Migrated: mounted through the CSI translation of an in-tree volume (unknown, false,
	// after a restart, as the kubelet's reconstructed specs are CSI specs).
	Migrated bool
}

// AttachedVolume is a volume in the actual state with its device state.
type AttachedVolume struct {
	Name       v1.UniqueVolumeName
	PluginName string
	// Spec is shared with the manager and must not be modified.
	Spec *volume.Spec
	// DeviceMountable: the plugin mounts the volume once per node (CSI NodeStage) before
	// each pod's SetUp; Attachable: it waits for the attach/detach controller first.
	DeviceMountable bool
	Attachable      bool
	// DevicePath is where the attached device appeared ("" when nothing is attached).
	DevicePath string
	// DeviceMountPath is the global mount (the CSI staging path) of a device-mountable
	// volume, and DeviceState its state.
	DeviceMountPath string
	DeviceState     DeviceState
	// ExpandedTo is the size the node last expanded the volume to, so that an expansion is
	// not repeated before the claim's status says it is done.
	ExpandedTo *resource.Quantity
}

type attachedVolume struct {
	AttachedVolume
	pods map[types.UID]*MountedVolume
	// seLinuxContext is the -o context the volume was first mounted with since it entered
	// the actual state (its device, or without one its first pod), nil before that or
	// when unknown (reconstructed). Upstream keeps it in the attached volume too, so that
	// a volume mounted with another context is unmounted entirely and mounted again.
	seLinuxContext *string
	// inUseExpansionError: the driver refused to expand the volume while it is in use
	// here; it is not expanded online again until it leaves the actual state.
	inUseExpansionError bool
}

// actualState records what is attached, device-mounted and mounted (upstream:
// ActualStateOfWorld). It is safe for concurrent use. Only the manager changes it; embedders
// read it through the ActualState view, whose methods return copies.
type actualState struct {
	mu      sync.RWMutex
	volumes map[v1.UniqueVolumeName]*attachedVolume
	byPod   map[types.UID]map[v1.UniqueVolumeName]bool
}

// newActualState returns an empty actual state.
func newActualState() *actualState {
	return &actualState{volumes: map[v1.UniqueVolumeName]*attachedVolume{}, byPod: map[types.UID]map[v1.UniqueVolumeName]bool{}}
}

// markAttached adds the volume (attached, or verified as needing no attach).
func (a *actualState) markAttached(av AttachedVolume) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.volumes[av.Name]; cur != nil {
		if av.DevicePath != "" {
			cur.DevicePath = av.DevicePath
		}
		if av.Spec != nil {
			cur.Spec = av.Spec
		}
		cur.Attachable, cur.DeviceMountable = av.Attachable, av.DeviceMountable
		return
	}
	if av.DeviceState == "" {
		av.DeviceState = DeviceNotMounted
	}
	a.volumes[av.Name] = &attachedVolume{AttachedVolume: av, pods: map[types.UID]*MountedVolume{}}
}

// IsAttached reports whether the volume is in the actual state.
func (a *actualState) IsAttached(name v1.UniqueVolumeName) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.volumes[name] != nil
}

// Volume returns the volume's attach and device state.
func (a *actualState) Volume(name v1.UniqueVolumeName) (AttachedVolume, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	av := a.volumes[name]
	if av == nil {
		return AttachedVolume{}, false
	}
	return av.AttachedVolume, true
}

// setDeviceState records the device state and, when mounted, its path.
func (a *actualState) setDeviceState(name v1.UniqueVolumeName, state DeviceState, deviceMountPath string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil {
		av.DeviceState = state
		if deviceMountPath != "" {
			av.DeviceMountPath = deviceMountPath
		}
	}
}

// noteSELinuxContext records the context of a successful device or pod mount, unless one
// is already recorded: later mounts share the first one's superblock.
func (a *actualState) noteSELinuxContext(name v1.UniqueVolumeName, label string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil && av.seLinuxContext == nil {
		av.seLinuxContext = &label
	}
}

// seLinuxContext returns the context the volume is mounted with, if one is recorded.
func (a *actualState) seLinuxContext(name v1.UniqueVolumeName) (string, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if av := a.volumes[name]; av != nil && av.seLinuxContext != nil {
		return *av.seLinuxContext, true
	}
	return "", false
}

// setExpanded records that the node expanded the volume to size.
func (a *actualState) setExpanded(name v1.UniqueVolumeName, size resource.Quantity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil {
		av.ExpandedTo = &size
	}
}

// setMountState records a pod's mount of an attached volume. VolumeNotMounted removes
// it. A reconstructed entry keeps its flag.
func (a *actualState) setMountState(mv MountedVolume) {
	a.mu.Lock()
	defer a.mu.Unlock()
	av := a.volumes[mv.Name]
	if av == nil {
		return
	}
	if mv.State == VolumeNotMounted {
		delete(av.pods, mv.PodUID)
		if set := a.byPod[mv.PodUID]; set != nil {
			delete(set, mv.Name)
			if len(set) == 0 {
				delete(a.byPod, mv.PodUID)
			}
		}
		return
	}
	if cur := av.pods[mv.PodUID]; cur != nil {
		if cur.Reconstructed {
			mv.Reconstructed = mv.State != VolumeMounted
		}
		if mv.MountPath == "" {
			mv.MountPath = cur.MountPath
		}
	}
	m := mv
	av.pods[mv.PodUID] = &m
	if a.byPod[mv.PodUID] == nil {
		a.byPod[mv.PodUID] = map[v1.UniqueVolumeName]bool{}
	}
	a.byPod[mv.PodUID][mv.Name] = true
}

// completeMount records a successful SetUp with the SELinux context label. stale means the
// contents changed while it ran, so the volume stays marked for remount.
func (a *actualState) completeMount(mv MountedVolume, stale bool, label string) {
	mv.State = VolumeMounted
	mv.RemountRequired = stale
	mv.Reconstructed = false
	a.setMountState(mv)
	a.noteSELinuxContext(mv.Name, label)
}

// markInUseExpansionError records a FAILED_PRECONDITION answer to NodeExpandVolume.
func (a *actualState) markInUseExpansionError(name v1.UniqueVolumeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil {
		av.inUseExpansionError = true
	}
}

// expandableOnline reports whether the mounted volume may be expanded online: not after
// the driver refused because it is in use (upstream volumeInUseErrorForExpansion).
func (a *actualState) expandableOnline(name v1.UniqueVolumeName) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	av := a.volumes[name]
	return av != nil && !av.inUseExpansionError
}

// PodVolume returns the pod's mount of the volume.
func (a *actualState) PodVolume(uid types.UID, name v1.UniqueVolumeName) (MountedVolume, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if av := a.volumes[name]; av != nil {
		if m := av.pods[uid]; m != nil {
			return *m, true
		}
	}
	return MountedVolume{}, false
}

// PodVolumes returns the pod's mounted and uncertain volumes, sorted by name.
func (a *actualState) PodVolumes(uid types.UID) []MountedVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]MountedVolume, 0, len(a.byPod[uid]))
	for name := range a.byPod[uid] {
		out = append(out, *a.volumes[name].pods[uid])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// markRemountRequired flags the named volumes of the pod for a remount (a refresh).
func (a *actualState) markRemountRequired(uid types.UID, names []v1.UniqueVolumeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, name := range names {
		if av := a.volumes[name]; av != nil {
			if m := av.pods[uid]; m != nil {
				m.RemountRequired = true
			}
		}
	}
}

// PodUIDs lists the pods with mounted or uncertain volumes.
func (a *actualState) PodUIDs() []types.UID {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Collect(maps.Keys(a.byPod))
}

// UnusedVolumes lists volumes no pod has mounted: candidates for device unmount.
func (a *actualState) UnusedVolumes() []AttachedVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []AttachedVolume
	for _, av := range a.volumes {
		if len(av.pods) == 0 {
			out = append(out, av.AttachedVolume)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ActualVolume is a volume of the actual state with every pod's mount of it.
type ActualVolume struct {
	AttachedVolume
	// Mounts are the pods' mounted or uncertain mounts of the volume, sorted by pod UID.
	// A volume without mounts is on its way out (device unmount, detach) or on its way in.
	Mounts []MountedVolume
}

// Volumes returns a copy of the whole actual state, taken at one instant, sorted by name.
func (a *actualState) Volumes() []ActualVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]ActualVolume, 0, len(a.volumes))
	for _, av := range a.volumes {
		v := ActualVolume{AttachedVolume: av.AttachedVolume, Mounts: make([]MountedVolume, 0, len(av.pods))}
		for _, mv := range av.pods {
			v.Mounts = append(v.Mounts, *mv)
		}
		sort.Slice(v.Mounts, func(i, j int) bool { return v.Mounts[i].PodUID < v.Mounts[j].PodUID })
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// VolumePods returns every pod's mount of the volume.
func (a *actualState) VolumePods(name v1.UniqueVolumeName) []MountedVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	av := a.volumes[name]
	if av == nil {
		return nil
	}
	out := make([]MountedVolume, 0, len(av.pods))
	for _, m := range av.pods {
		out = append(out, *m)
	}
	return out
}

// VolumeMountCount is the number of pods with the volume mounted or uncertain.
func (a *actualState) VolumeMountCount(name v1.UniqueVolumeName) int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if av := a.volumes[name]; av != nil {
		return len(av.pods)
	}
	return 0
}

// remove drops a volume with no pods (detached, or never device-mounted).
func (a *actualState) remove(name v1.UniqueVolumeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil && len(av.pods) == 0 {
		delete(a.volumes, name)
	}
}

// AttachableVolumes lists the attachable volumes present, for node.status.volumesInUse:
// a volume stays in use until it is fully torn down (upstream PR #71145).
func (a *actualState) AttachableVolumes() []v1.UniqueVolumeName {
	a.mu.RLock()
	defer a.mu.RUnlock()
	set := map[v1.UniqueVolumeName]bool{}
	for name, av := range a.volumes {
		if av.Attachable {
			set[name] = true
		}
	}
	return sortedNames(set)
}

// Counts returns the number of mounted (not uncertain) pod volumes per plugin.
func (a *actualState) Counts() map[string]int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := map[string]int{}
	for _, av := range a.volumes {
		for _, m := range av.pods {
			if m.State == VolumeMounted {
				out[av.PluginName]++
			}
		}
	}
	return out
}
