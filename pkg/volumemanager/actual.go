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
	Name       v1.UniqueVolumeName
	PluginName string
	PodUID     types.UID
	// SpecName is the directory name under the pod's plugin directory.
	SpecName string
	// Block: a block volume, mapped under the pod's volumeDevices directory.
	Block           bool
	State           MountState
	RemountRequired bool
	// Reconstructed: found on disk after a restart. A final SetUp error does not downgrade
	// it to not-mounted, so it is still torn down when no pod wants it.
	Reconstructed bool
	// RefreshAt, when set, is when the volume's contents expire (tokens).
	RefreshAt time.Time
}

// AttachedVolume is a volume in the actual state with its device state.
type AttachedVolume struct {
	Name            v1.UniqueVolumeName
	PluginName      string
	Spec            *volume.Spec
	DeviceMountable bool
	Attachable      bool
	DevicePath      string
	DeviceMountPath string
	DeviceState     DeviceState
	// ExpandedTo is the size the node last expanded the volume to, so that an expansion is
	// not repeated before the claim's status says it is done.
	ExpandedTo *resource.Quantity
}

type attachedVolume struct {
	AttachedVolume
	pods map[types.UID]*MountedVolume
}

// ActualState records what is attached, device-mounted and mounted (upstream:
// ActualStateOfWorld). It is safe for concurrent use.
type ActualState struct {
	mu      sync.RWMutex
	volumes map[v1.UniqueVolumeName]*attachedVolume
	byPod   map[types.UID]map[v1.UniqueVolumeName]bool
}

// NewActualState returns an empty actual state.
func NewActualState() *ActualState {
	return &ActualState{volumes: map[v1.UniqueVolumeName]*attachedVolume{}, byPod: map[types.UID]map[v1.UniqueVolumeName]bool{}}
}

// MarkAttached adds the volume (attached, or verified as needing no attach).
func (a *ActualState) MarkAttached(av AttachedVolume) {
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
func (a *ActualState) IsAttached(name v1.UniqueVolumeName) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.volumes[name] != nil
}

// Volume returns the volume's attach and device state.
func (a *ActualState) Volume(name v1.UniqueVolumeName) (AttachedVolume, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	av := a.volumes[name]
	if av == nil {
		return AttachedVolume{}, false
	}
	return av.AttachedVolume, true
}

// SetDeviceState records the device state and, when mounted, its path.
func (a *ActualState) SetDeviceState(name v1.UniqueVolumeName, state DeviceState, deviceMountPath string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil {
		av.DeviceState = state
		if deviceMountPath != "" {
			av.DeviceMountPath = deviceMountPath
		}
	}
}

// SetExpanded records that the node expanded the volume to size.
func (a *ActualState) SetExpanded(name v1.UniqueVolumeName, size resource.Quantity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil {
		av.ExpandedTo = &size
	}
}

// SetMountState records a pod's mount of an attached volume. VolumeNotMounted removes
// it. A reconstructed entry keeps its flag.
func (a *ActualState) SetMountState(mv MountedVolume) {
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
	if cur := av.pods[mv.PodUID]; cur != nil && cur.Reconstructed {
		mv.Reconstructed = mv.State != VolumeMounted
	}
	m := mv
	av.pods[mv.PodUID] = &m
	if a.byPod[mv.PodUID] == nil {
		a.byPod[mv.PodUID] = map[v1.UniqueVolumeName]bool{}
	}
	a.byPod[mv.PodUID][mv.Name] = true
}

// CompleteMount records a successful SetUp. stale means the contents changed while it ran,
// so the volume stays marked for remount.
func (a *ActualState) CompleteMount(mv MountedVolume, stale bool) {
	mv.State = VolumeMounted
	mv.RemountRequired = stale
	mv.Reconstructed = false
	a.SetMountState(mv)
}

// PodVolume returns the pod's mount of the volume.
func (a *ActualState) PodVolume(uid types.UID, name v1.UniqueVolumeName) (MountedVolume, bool) {
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
func (a *ActualState) PodVolumes(uid types.UID) []MountedVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]MountedVolume, 0, len(a.byPod[uid]))
	for name := range a.byPod[uid] {
		out = append(out, *a.volumes[name].pods[uid])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// MarkRemountRequired flags the named volumes of the pod for a remount (a refresh).
func (a *ActualState) MarkRemountRequired(uid types.UID, names []v1.UniqueVolumeName) {
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
func (a *ActualState) PodUIDs() []types.UID {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Collect(maps.Keys(a.byPod))
}

// UnusedVolumes lists volumes no pod has mounted: candidates for device unmount.
func (a *ActualState) UnusedVolumes() []AttachedVolume {
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

// VolumePods returns every pod's mount of the volume.
func (a *ActualState) VolumePods(name v1.UniqueVolumeName) []MountedVolume {
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
func (a *ActualState) VolumeMountCount(name v1.UniqueVolumeName) int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if av := a.volumes[name]; av != nil {
		return len(av.pods)
	}
	return 0
}

// Remove drops a volume with no pods (detached, or never device-mounted).
func (a *ActualState) Remove(name v1.UniqueVolumeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av := a.volumes[name]; av != nil && len(av.pods) == 0 {
		delete(a.volumes, name)
	}
}

// AttachableVolumes lists the attachable volumes present, for node.status.volumesInUse:
// a volume stays in use until it is fully torn down (upstream PR #71145).
func (a *ActualState) AttachableVolumes() []v1.UniqueVolumeName {
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
func (a *ActualState) Counts() map[string]int {
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
