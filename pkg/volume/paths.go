package volume

import (
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Paths computes every on-disk location in one place. The layout is the kubelet's, so
// tools and CSI drivers that expect kubelet paths work when Root is /var/lib/kubelet:
//
//	<root>/pods/<uid>/volumes/<plugin with / as ~>/<volume>
//	<root>/pods/<uid>/plugins/<plugin with / as ~>/<volume>     (per-pod plugin data, e.g. emptyDir's ready marker)
//	<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>
//	<root>/pods/<uid>/volumeDevices/<plugin with / as ~>/<volume> (block volumes: a symlink to the device)
//	<root>/plugins/<plugin>/...                                 (global, e.g. CSI staging)
type Paths struct{ Root string }

// EscapePluginName turns "kubernetes.io/configmap" into "kubernetes.io~configmap".
func EscapePluginName(name string) string { return strings.ReplaceAll(name, "/", "~") }

// UnescapePluginName reverses EscapePluginName.
func UnescapePluginName(name string) string { return strings.ReplaceAll(name, "~", "/") }

// PodsDir is <root>/pods.
func (p Paths) PodsDir() string { return filepath.Join(p.Root, "pods") }

// PodDir is <root>/pods/<uid>.
func (p Paths) PodDir(uid types.UID) string { return filepath.Join(p.PodsDir(), string(uid)) }

// PodVolumesDir is <root>/pods/<uid>/volumes.
func (p Paths) PodVolumesDir(uid types.UID) string { return filepath.Join(p.PodDir(uid), "volumes") }

// PodVolumeDir is where a plugin sets a pod's volume up.
func (p Paths) PodVolumeDir(uid types.UID, plugin, volume string) string {
	return filepath.Join(p.PodVolumesDir(uid), EscapePluginName(plugin), volume)
}

// PodVolumeDevicesDir is <root>/pods/<uid>/volumeDevices, where block volumes are mapped.
func (p Paths) PodVolumeDevicesDir(uid types.UID) string {
	return filepath.Join(p.PodDir(uid), "volumeDevices")
}

// PodVolumeDevicePath is the pod's link to a mapped block volume (upstream
// GetPodVolumeDeviceDir + the volume name), the path a container runtime would hand the
// container as its device.
func (p Paths) PodVolumeDevicePath(uid types.UID, plugin, volume string) string {
	return filepath.Join(p.PodVolumeDevicesDir(uid), EscapePluginName(plugin), volume)
}

// PodPluginDir is per-pod, per-volume plugin data outside the volume itself.
func (p Paths) PodPluginDir(uid types.UID, plugin, volume string) string {
	return filepath.Join(p.PodDir(uid), "plugins", EscapePluginName(plugin), volume)
}

// PodSubpathsDir is <root>/pods/<uid>/volume-subpaths.
func (p Paths) PodSubpathsDir(uid types.UID) string {
	return filepath.Join(p.PodDir(uid), "volume-subpaths")
}

// PodSubpathDir is the bind-mount target of one container's subPath volumeMount.
func (p Paths) PodSubpathDir(uid types.UID, volume, container string, index int) string {
	return filepath.Join(p.PodSubpathsDir(uid), volume, container, strconv.Itoa(index))
}

// PluginDir is <root>/plugins/<plugin>, the plugin's global directory.
func (p Paths) PluginDir(plugin string) string { return filepath.Join(p.Root, "plugins", plugin) }

// PluginRegistryDir is <root>/plugins_registry, where CSI drivers' registrars
// (node-driver-registrar) put their registration sockets; see pkg/pluginregistration.
func (p Paths) PluginRegistryDir() string { return filepath.Join(p.Root, "plugins_registry") }
