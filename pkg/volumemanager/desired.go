package volumemanager

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// maxPodErrors bounds the errors kept per pod, as upstream.
const maxPodErrors = 10

// DesiredVolume is one volume one pod wants. Its pointers (Spec, Claim) are shared with the
// manager and must not be modified.
type DesiredVolume struct {
	// Name is the unique volume name, as node.status.volumesInUse lists it.
	Name       v1.UniqueVolumeName
	PluginName string
	// Spec is the resolved volume: the pod's inline volume, or the claim's PV.
	Spec       *volume.Spec
	OuterNames []string // pod.spec.volumes[].name entries resolving to this volume
	// Attachable: the attach/detach controller attaches it first; DeviceMountable: the
	// plugin mounts it once per node before each pod's SetUp.
	Attachable      bool
	DeviceMountable bool
	// RequiresRemount: SetUp runs again when the contents change (ConfigMap, Secret,
	// downward API, projected).
	RequiresRemount bool
	// Claim is the PVC of a writable PVC-backed volume: when its PV grew beyond the claim's
	// status.capacity, the node finishes the expansion.
	Claim *v1.PersistentVolumeClaim
	// SELinuxLabel is the SELinux context the volume is mounted with for the pod
	// (-o context=...), "" for none.
	SELinuxLabel string
	// seLinuxOriginal is the label the pod would mount the volume with ("" for
	// seLinuxChangePolicy Recursive), whether or not the volume type allows it; pods
	// sharing the volume must agree on it.
	seLinuxOriginal string
	// RequestTime is when the volume was first wanted by the pod, for
	// volume_operation_total_seconds{operation_name="overall_volume_mount"}.
	RequestTime time.Time
}

// desiredState maps volumes to the pods that want them (upstream: DesiredStateOfWorld). It is
// safe for concurrent use. Only the manager changes it; embedders read it through the
// DesiredState view, whose methods return copies.
type desiredState struct {
	mu            sync.RWMutex
	pods          map[types.UID]*desiredPod
	byVolume      map[v1.UniqueVolumeName]map[types.UID]bool
	reportedInUse map[v1.UniqueVolumeName]bool
}

type desiredPod struct {
	pod     *v1.Pod
	volumes map[v1.UniqueVolumeName]*DesiredVolume
	// errors say why volumes the pod wants could not be resolved: while there are any,
	// what the pod wants is not fully known.
	errors []string
	// held are the failures of volumes kept from an earlier resolution: a read that failed
	// once the volume was resolved does not take it from the pod.
	held []string
}

// volumeFailure is a pod volume that could not be resolved, and why.
type volumeFailure struct {
	outer   string // the pod.spec.volumes[].name
	message string
}

// newDesiredState returns an empty desired state.
func newDesiredState() *desiredState {
	return &desiredState{
		pods:          map[types.UID]*desiredPod{},
		byVolume:      map[v1.UniqueVolumeName]map[types.UID]bool{},
		reportedInUse: map[v1.UniqueVolumeName]bool{},
	}
}

// setPod replaces the volumes pod wants, keeping the request times of volumes it already
// wanted, and records the volumes that could not be resolved. It is a refresh: the pod
// object is updated every time. A volume the pod wanted before and that now failed to
// resolve is kept as it was (held state wins over a failed read: the kubelet's populator
// never removes a running pod's volume because a read failed); its failure is held, not
// an error of the pod.
func (d *desiredState) setPod(pod *v1.Pod, volumes []DesiredVolume, failures []volumeFailure) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.pods[pod.UID]
	dp := &desiredPod{pod: pod, volumes: make(map[v1.UniqueVolumeName]*DesiredVolume, len(volumes))}
	for i := range volumes {
		v := volumes[i]
		if old != nil {
			if prev, ok := old.volumes[v.Name]; ok {
				v.RequestTime = prev.RequestTime
			}
		}
		if v.RequestTime.IsZero() {
			v.RequestTime = time.Now()
		}
		dp.volumes[v.Name] = &v
	}
	for _, f := range failures {
		if prev := old.volumeNamed(f.outer); prev != nil {
			if _, ok := dp.volumes[prev.Name]; !ok {
				dp.volumes[prev.Name] = prev
			}
			dp.held = append(dp.held, f.message)
			continue
		}
		dp.errors = append(dp.errors, f.message)
	}
	if len(dp.errors) > maxPodErrors {
		dp.errors = dp.errors[:maxPodErrors]
	}
	if old != nil {
		for name := range old.volumes {
			if _, ok := dp.volumes[name]; !ok {
				d.unindex(name, pod.UID)
			}
		}
	}
	for name := range dp.volumes {
		if d.byVolume[name] == nil {
			d.byVolume[name] = map[types.UID]bool{}
		}
		d.byVolume[name][pod.UID] = true
	}
	d.pods[pod.UID] = dp
}

// volumeNamed returns the volume that the pod volume outer resolved to, or nil.
func (dp *desiredPod) volumeNamed(outer string) *DesiredVolume {
	if dp == nil {
		return nil
	}
	for _, v := range dp.volumes {
		if slices.Contains(v.OuterNames, outer) {
			return v
		}
	}
	return nil
}

// resolved reports whether the pod volume outer resolved at an earlier setPod.
func (d *desiredState) resolved(uid types.UID, outer string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.pods[uid].volumeNamed(outer) != nil
}

// deletePod forgets the pod and returns the volumes it wanted.
func (d *desiredState) deletePod(uid types.UID) []v1.UniqueVolumeName {
	d.mu.Lock()
	defer d.mu.Unlock()
	dp := d.pods[uid]
	if dp == nil {
		return nil
	}
	names := make([]v1.UniqueVolumeName, 0, len(dp.volumes))
	for name := range dp.volumes {
		d.unindex(name, uid)
		names = append(names, name)
	}
	delete(d.pods, uid)
	return names
}

func (d *desiredState) unindex(name v1.UniqueVolumeName, uid types.UID) {
	delete(d.byVolume[name], uid)
	if len(d.byVolume[name]) == 0 {
		delete(d.byVolume, name)
		delete(d.reportedInUse, name)
	}
}

// Pod returns the pod object last recorded, or nil. It is shared and must not be modified.
func (d *desiredState) Pod(uid types.UID) *v1.Pod {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if dp := d.pods[uid]; dp != nil {
		return dp.pod
	}
	return nil
}

// HasPod reports whether the pod is in the desired state (possibly with no volumes).
func (d *desiredState) HasPod(uid types.UID) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.pods[uid] != nil
}

// PodVolumes returns copies of the volumes the pod wants, sorted by name.
func (d *desiredState) PodVolumes(uid types.UID) []DesiredVolume {
	d.mu.RLock()
	defer d.mu.RUnlock()
	dp := d.pods[uid]
	if dp == nil {
		return nil
	}
	return dp.sortedVolumes()
}

// PodErrors returns why volumes of the pod could not be resolved at its last setPod.
func (d *desiredState) PodErrors(uid types.UID) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if dp := d.pods[uid]; dp != nil {
		return slices.Clone(dp.errors)
	}
	return nil
}

// heldErrors returns why volumes the pod keeps from an earlier resolution could not be
// read again at its last setPod.
func (d *desiredState) heldErrors(uid types.UID) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if dp := d.pods[uid]; dp != nil {
		return slices.Clone(dp.held)
	}
	return nil
}

// DesiredPod is one pod of the desired state and what it wants.
type DesiredPod struct {
	// Pod is the last object the populator saw; shared with the manager, do not modify.
	Pod *v1.Pod
	// Volumes are the volumes the pod wants, sorted by name.
	Volumes []DesiredVolume
	// Errors say why other volumes of the pod could not be resolved (at most 10).
	Errors []string
}

// Pods returns a copy of the whole desired state, taken at one instant, sorted by pod UID.
// A pod that is deleted, terminating or terminal wants nothing and is not listed.
func (d *desiredState) Pods() []DesiredPod {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]DesiredPod, 0, len(d.pods))
	for _, dp := range d.pods {
		out = append(out, dp.copy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.UID < out[j].Pod.UID })
	return out
}

func (dp *desiredPod) copy() DesiredPod {
	return DesiredPod{Pod: dp.pod, Volumes: dp.sortedVolumes(), Errors: slices.Clone(dp.errors)}
}

// sortedVolumes copies the pod's volumes, sorted by name.
func (dp *desiredPod) sortedVolumes() []DesiredVolume {
	out := make([]DesiredVolume, 0, len(dp.volumes))
	for _, v := range dp.volumes {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PodWantsVolume reports whether the pod wants the volume.
func (d *desiredState) PodWantsVolume(uid types.UID, name v1.UniqueVolumeName) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.byVolume[name][uid]
}

// VolumeWanted reports whether any pod wants the volume.
func (d *desiredState) VolumeWanted(name v1.UniqueVolumeName) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.byVolume[name]) > 0
}

// volumeWantedWith reports whether a pod wants the volume mounted with the SELinux context
// label. A volume mounted with another one is not wanted as it is (upstream: the DSW's
// VolumeExists compares the context): it is unmounted, then mounted with the new context.
func (d *desiredState) volumeWantedWith(name v1.UniqueVolumeName, label string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for uid := range d.byVolume[name] {
		if dv := d.pods[uid].volumes[name]; dv != nil && dv.SELinuxLabel == label {
			return true
		}
	}
	return false
}

// VolumeUsers returns the pods that want the volume: the usage tracker.
func (d *desiredState) VolumeUsers(name v1.UniqueVolumeName) []types.UID {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Sorted(maps.Keys(d.byVolume[name]))
}

// PodUIDs lists the pods in the desired state.
func (d *desiredState) PodUIDs() []types.UID {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Collect(maps.Keys(d.pods))
}

// AttachableVolumes lists the attachable volumes wanted, for node.status.volumesInUse.
func (d *desiredState) AttachableVolumes() []v1.UniqueVolumeName {
	d.mu.RLock()
	defer d.mu.RUnlock()
	seen := map[v1.UniqueVolumeName]bool{}
	for _, dp := range d.pods {
		for name, v := range dp.volumes {
			if v.Attachable {
				seen[name] = true
			}
		}
	}
	return sortedNames(seen)
}

// markReportedInUse records the volumes that node.status.volumesInUse now lists: only
// those may be mounted, so the attach/detach controller never detaches a volume in use.
func (d *desiredState) markReportedInUse(names []v1.UniqueVolumeName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	set := map[v1.UniqueVolumeName]bool{}
	for _, n := range names {
		set[n] = true
	}
	for n := range d.byVolume {
		d.reportedInUse[n] = set[n]
	}
}

// ReportedInUse reports whether node.status.volumesInUse lists the volume.
func (d *desiredState) ReportedInUse(name v1.UniqueVolumeName) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.reportedInUse[name]
}

// Counts returns the number of (pod, volume) pairs per plugin.
func (d *desiredState) Counts() map[string]int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := map[string]int{}
	for _, dp := range d.pods {
		for _, v := range dp.volumes {
			out[v.PluginName]++
		}
	}
	return out
}

func sortedNames(set map[v1.UniqueVolumeName]bool) []v1.UniqueVolumeName {
	return slices.Sorted(maps.Keys(set))
}

// podVolume returns the desired volume name of the pod uid.
func (d *desiredState) podVolume(uid types.UID, name v1.UniqueVolumeName) (DesiredVolume, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if dp := d.pods[uid]; dp != nil {
		if dv := dp.volumes[name]; dv != nil {
			return *dv, true
		}
	}
	return DesiredVolume{}, false
}
