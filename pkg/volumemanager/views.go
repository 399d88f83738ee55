package volumemanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DesiredState is the read-only view of the desired state of world (upstream:
// DesiredStateOfWorld) that Manager.DesiredState returns: which pod wants which volume.
// Every method returns copies taken at one instant; the Pod, Spec and Claim pointers are
// shared with the manager and must not be modified. Only the manager implements it; methods
// may be added.
type DesiredState interface {
	// Pods returns the whole desired state, sorted by pod UID. A pod that is deleted,
	// terminating or terminal wants nothing and is not listed.
	Pods() []DesiredPod
	// PodUIDs lists the pods in the desired state, in no particular order.
	PodUIDs() []types.UID
	// Pod returns the pod object last recorded, or nil.
	Pod(uid types.UID) *v1.Pod
	// PodVolumes returns the volumes the pod wants, sorted by name.
	PodVolumes(uid types.UID) []DesiredVolume
	// PodErrors says why volumes of the pod could not be resolved (a missing claim, an
	// unbound one, a volume no plugin supports).
	PodErrors(uid types.UID) []string
}

// ActualState is the read-only view of the actual state of world (upstream:
// ActualStateOfWorld) that Manager.ActualState returns: what is attached, device-mounted
// and mounted for each pod, with paths, including what was reconstructed after a restart.
// Every method returns copies taken at one instant; the Spec pointers are shared with the
// manager and must not be modified. Only the manager implements it; methods may be added.
type ActualState interface {
	// Volumes returns the whole actual state, sorted by volume name, each volume with
	// every pod's mount of it.
	Volumes() []ActualVolume
	// Volume returns the volume's attach and device state.
	Volume(name v1.UniqueVolumeName) (AttachedVolume, bool)
	// IsAttached reports whether the volume is in the actual state.
	IsAttached(name v1.UniqueVolumeName) bool
	// PodUIDs lists the pods with mounted or uncertain volumes, in no particular order.
	PodUIDs() []types.UID
	// PodVolumes returns the pod's mounted and uncertain volumes, sorted by name.
	PodVolumes(uid types.UID) []MountedVolume
	// PodVolume returns the pod's mount of the volume.
	PodVolume(uid types.UID, name v1.UniqueVolumeName) (MountedVolume, bool)
}

// The states are the views' only implementations.
var (
	_ DesiredState = (*desiredState)(nil)
	_ ActualState  = (*actualState)(nil)
)
