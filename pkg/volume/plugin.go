package volume

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Plugin is a volume type (emptyDir, configMap, csi, ...). Implementations must be safe
// for concurrent use: the operation executor runs operations of different volumes at once.
type Plugin interface {
	// Init is called once, when the plugin is registered.
	Init(host Host) error
	// Name is the plugin name, e.g. "kubernetes.io/configmap".
	Name() string
	// CanSupport reports whether the plugin handles spec.
	CanSupport(spec *Spec) bool
	// RequiresRemount reports whether SetUp must be called again to refresh the contents
	// (configMap, secret, downwardAPI, projected; CSI with requiresRepublish).
	RequiresRemount(spec *Spec) bool
	// NewMounter returns a Mounter of spec for pod.
	NewMounter(spec *Spec, pod *v1.Pod) (Mounter, error)
	// NewUnmounter returns an Unmounter of the volume directory named volumeName of the pod.
	NewUnmounter(volumeName string, podUID types.UID) (Unmounter, error)
	// ConstructVolumeSpec rebuilds a spec from what is on disk, for reconstruction after a
	// restart. volumePath is the pod's volume directory.
	ConstructVolumeSpec(volumeName, volumePath string) (*Spec, error)
}

// BlockPlugin is a plugin that also maps raw block volumes, those a pod uses through
// volumeDevices (upstream BlockVolumePlugin). A block mapper is a Mounter whose SetUp maps
// the device for the pod and whose Path is the pod's link to it,
// <root>/pods/<uid>/volumeDevices/<plugin>/<volume>; the device itself is staged by the
// plugin's DeviceMounter like a filesystem volume's.
type BlockPlugin interface {
	Plugin
	// NewBlockMapper returns the Mounter of block volume spec for pod.
	NewBlockMapper(spec *Spec, pod *v1.Pod) (Mounter, error)
	// NewBlockUnmapper returns the Unmounter of the pod's block volume named volumeName.
	NewBlockUnmapper(volumeName string, podUID types.UID) (Unmounter, error)
	// ConstructBlockVolumeSpec rebuilds a block volume's spec after a restart; mapPath is
	// the pod's link to the device.
	ConstructBlockVolumeSpec(volumeName, mapPath string) (*Spec, error)
}

// ExpandablePlugin finishes an expansion on the node after the controller grew the volume:
// it grows the filesystem of a mounted volume, or refreshes the node's view of a block
// device (upstream NodeExpandableVolumePlugin; CSI NodeExpandVolume).
type ExpandablePlugin interface {
	Plugin
	// NodeExpand makes the volume, set up for pod podUID, newSize large. It returns nil
	// at once when the plugin has nothing to do on the node.
	NodeExpand(ctx context.Context, spec *Spec, podUID types.UID, newSize resource.Quantity) error
}

// Attributes describe a set-up volume.
type Attributes struct {
	ReadOnly bool
	// Managed: the plugin manages ownership, so fsGroup is applied.
	Managed bool
}

// MounterArgs carry pod-level settings into SetUp.
type MounterArgs struct {
	FsUser              *int64
	FsGroup             *int64
	FSGroupChangePolicy *v1.PodFSGroupChangePolicy
	// DesiredSize is the emptyDir size: the least of sizeLimit, the pod's memory limit
	// (Memory medium) and the node's allocatable memory.
	DesiredSize *resource.Quantity
	// SELinuxLabel, when set, is the SELinux context to mount the volume with
	// (-o context="<label>"): the volume manager sets it only for plugins that are
	// SELinuxContextMountPlugins and say they support it for the volume.
	SELinuxLabel string
}

// SELinuxContextMountPlugin is a plugin that can mount a volume with an SELinux context
// (upstream SupportsSELinuxContextMount; CSI when CSIDriver.spec.seLinuxMount is true).
type SELinuxContextMountPlugin interface {
	SupportsSELinuxContextMount(spec *Spec) (bool, error)
}

// SELinuxContextReader is a SELinuxContextMountPlugin that records beside each pod volume
// the SELinux context it mounted the volume with, so that the volume manager knows it after
// a restart (upstream ReconstructedVolume.SELinuxMountContext; CSI: vol_data.json) and
// does not reuse a volume mounted with another context than a new pod needs.
type SELinuxContextReader interface {
	// MountedSELinuxContext returns the context recorded for the pod volume directory dir,
	// "" when none is.
	MountedSELinuxContext(dir string) (string, error)
}

// Mounter sets a volume up for one pod. SetUp must be idempotent: it is called again on
// remount and after a restart, with the volume possibly already set up.
type Mounter interface {
	// Path is the volume directory the containers would see.
	Path() string
	SetUp(ctx context.Context, args MounterArgs) error
	Attributes() Attributes
}

// Refresher is implemented by a Mounter whose contents expire (service account tokens):
// after a successful SetUp the volume manager remounts the volume after RefreshAfter.
type Refresher interface {
	RefreshAfter() time.Duration
}

// Unmounter tears a pod's volume down. TearDown must be idempotent and must succeed on a
// volume that is already gone.
type Unmounter interface {
	// Path is the volume directory being torn down.
	Path() string
	// TearDown unmounts or removes what SetUp made at Path.
	TearDown(ctx context.Context) error
}

// WrappableMounter can set its volume up in another plugin's directory: emptyDir under
// configMap, secret, downwardAPI and projected (upstream: NewWrapperMounter + SetUpAt).
type WrappableMounter interface {
	Mounter
	// SetUpAt is SetUp at dir instead of Path.
	SetUpAt(ctx context.Context, dir string, args MounterArgs) error
}

// WrappableUnmounter tears down what a WrappableMounter set up at dir.
type WrappableUnmounter interface {
	Unmounter
	// TearDownAt is TearDown at dir instead of Path.
	TearDownAt(ctx context.Context, dir string) error
}

// DeviceMountablePlugin is a plugin with a per-node global mount (CSI NodeStage), shared by
// every pod of the volume on the node. Its volumes are named without the pod, so all its
// operations on one volume are serialized.
type DeviceMountablePlugin interface {
	Plugin
	// VolumeName is the unique name of the volume on the node, without the plugin
	// prefix, e.g. "<driver>^<handle>" for CSI.
	VolumeName(spec *Spec) (string, error)
	CanDeviceMount(spec *Spec) (bool, error)
	NewDeviceMounter() (DeviceMounter, error)
	NewDeviceUnmounter() (DeviceUnmounter, error)
	// DeviceMountRefs lists other mounts that still use the global mount.
	DeviceMountRefs(deviceMountPath string) ([]string, error)
}

// DeviceMounter mounts a volume's device at its global mount path (CSI NodeStage).
type DeviceMounter interface {
	// DeviceMountPath is the volume's global mount path on the node.
	DeviceMountPath(spec *Spec) (string, error)
	// MountDevice mounts the attached device (devicePath, "" for none) at
	// deviceMountPath; it must be idempotent.
	MountDevice(ctx context.Context, spec *Spec, devicePath, deviceMountPath string, args MounterArgs) error
}

// DeviceUnmounter reverses MountDevice (CSI NodeUnstage).
type DeviceUnmounter interface {
	UnmountDevice(ctx context.Context, deviceMountPath string) error
}

// AttachablePlugin is a device-mountable plugin whose volumes are attached to the node by
// the attach/detach controller first (CSI with attachRequired). The node agent only waits.
type AttachablePlugin interface {
	DeviceMountablePlugin
	// CanAttach reports whether the volume needs an attach (CSI: the driver's
	// attachRequired).
	CanAttach(spec *Spec) (bool, error)
	// NewAttacher returns what waits for the volume's attach.
	NewAttacher() (Attacher, error)
}

// Attacher waits for the controller-side attach to complete.
type Attacher interface {
	DeviceMounter
	// WaitForAttach returns the device path once the volume is attached.
	WaitForAttach(ctx context.Context, spec *Spec, devicePath string, pod *v1.Pod) (string, error)
}
