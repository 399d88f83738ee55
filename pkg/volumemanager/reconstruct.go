package volumemanager

import (
	"context"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/volume"
)

// reconstruct rebuilds the actual state after a restart from <root>/pods/<uid>/volumes/
// <plugin>/<volume> and <root>/pods/<uid>/volumeDevices/<plugin>/<volume> (upstream
// KEP-3756). Every volume found is uncertain: a pod that still
// wants it gets SetUp again (plugins are idempotent, emptyDir keeps its data), and one that
// does not gets TearDown, which also unmounts what /proc/self/mountinfo still has. It
// returns every pod UID found on disk, so pods that are gone are cleaned up.
func (m *Manager) reconstruct(ctx context.Context) []types.UID {
	logger := klog.FromContext(ctx)
	podDirs, err := os.ReadDir(m.cfg.Paths.PodsDir())
	if err != nil {
		if !os.IsNotExist(err) {
			logger.Error(err, "Cannot read the pods directory; nothing reconstructed")
		}
		return nil
	}
	var uids []types.UID
	for _, pd := range podDirs {
		if !pd.IsDir() {
			continue
		}
		uid := types.UID(pd.Name())
		uids = append(uids, uid)
		for _, e := range m.podVolumesOnDisk(uid) {
			m.metrics.reconstructed.Inc()
			if err := m.reconstructVolume(uid, e); err != nil {
				m.metrics.reconstructErrs.Inc()
				// removePodDir tears it down through its plugin when the pod is gone.
				logger.Error(err, "Could not reconstruct volume", "podUID", uid, "plugin", e.plugin, "volume", e.name, "block", e.block)
			}
		}
	}
	return uids
}

// diskVolume is a pod volume found on disk: a directory under the pod's volumes/, or a
// block volume's link under its volumeDevices/.
type diskVolume struct {
	plugin, name, path string
	block              bool
}

// podVolumesOnDisk lists the pod's volume directories and block volume links (upstream
// getVolumesFromPodDir).
func (m *Manager) podVolumesOnDisk(uid types.UID) []diskVolume {
	var out []diskVolume
	for _, root := range []struct {
		dir   string
		block bool
	}{{m.cfg.Paths.PodVolumesDir(uid), false}, {m.cfg.Paths.PodVolumeDevicesDir(uid), true}} {
		pluginDirs, _ := os.ReadDir(root.dir)
		for _, pld := range pluginDirs {
			vols, _ := os.ReadDir(filepath.Join(root.dir, pld.Name()))
			for _, v := range vols {
				out = append(out, diskVolume{plugin: volume.UnescapePluginName(pld.Name()), name: v.Name(),
					path: filepath.Join(root.dir, pld.Name(), v.Name()), block: root.block})
			}
		}
	}
	return out
}

func (m *Manager) reconstructVolume(uid types.UID, e diskVolume) error {
	pluginName, specName := e.plugin, e.name
	var spec *volume.Spec
	var err error
	var seLinuxContext string
	if e.block {
		bp, berr := m.plugins.FindBlockByName(pluginName)
		if berr != nil {
			return berr
		}
		spec, err = bp.ConstructBlockVolumeSpec(specName, e.path)
	} else {
		plugin, perr := m.plugins.FindByName(pluginName)
		if perr != nil {
			return perr
		}
		spec, err = plugin.ConstructVolumeSpec(specName, e.path)
		if r, ok := plugin.(volume.SELinuxContextReader); ok && err == nil {
			// Only a recorded context counts: a volume set up before contexts were
			// recorded is not remounted for that alone.
			seLinuxContext, _ = r.MountedSELinuxContext(e.path)
		}
	}
	if err != nil {
		return err
	}
	name, _, deviceMountable, err := uniqueVolumeName(m.plugins, spec, uid)
	if err != nil {
		return err
	}
	av := AttachedVolume{Name: name, PluginName: pluginName, Spec: spec, DeviceMountable: deviceMountable, DeviceState: DeviceNotMounted}
	// Whether the plugin attaches it, as the kubelet's reconstruction asks the plugin: an
	// attachable volume stays in node.status.volumesInUse until its device is unmounted, and
	// its unmount must update that list at once, or the attach/detach controller waits for
	// the next periodic status to detach it.
	if ap, err := m.plugins.FindAttachable(spec); err == nil && ap != nil {
		av.Attachable = true
	}
	if deviceMountable {
		av.DeviceState = DeviceMountUncertain
		if dm, err := m.plugins.FindDeviceMountable(spec); err == nil && dm != nil {
			if dmr, err := dm.NewDeviceMounter(); err == nil {
				av.DeviceMountPath, _ = dmr.DeviceMountPath(spec)
			}
		}
	}
	mv := MountedVolume{Name: name, PluginName: pluginName, PodUID: uid, SpecName: specName,
		Block: e.block, State: VolumeMountUncertain, Reconstructed: true}
	if u, err := m.newUnmounter(pluginName, specName, uid, e.block); err == nil {
		mv.MountPath = u.Path()
	}
	m.asw.markAttached(av)
	m.asw.setMountState(mv)
	if seLinuxContext != "" {
		m.asw.noteSELinuxContext(name, seLinuxContext)
	}
	return nil
}
