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
// <plugin>/<volume> (upstream KEP-3756). Every volume found is uncertain: a pod that still
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
		volsDir := m.cfg.Paths.PodVolumesDir(uid)
		pluginDirs, _ := os.ReadDir(volsDir)
		for _, pld := range pluginDirs {
			pluginName := volume.UnescapePluginName(pld.Name())
			vols, _ := os.ReadDir(filepath.Join(volsDir, pld.Name()))
			for _, v := range vols {
				m.metrics.reconstructed.Inc()
				if err := m.reconstructVolume(uid, pluginName, v.Name(), filepath.Join(volsDir, pld.Name(), v.Name())); err != nil {
					m.metrics.reconstructErrs.Inc()
					// removePodDir tears it down through its plugin when the pod is gone.
					logger.Error(err, "Could not reconstruct volume", "podUID", uid, "plugin", pluginName, "volume", v.Name())
				}
			}
		}
	}
	return uids
}

func (m *Manager) reconstructVolume(uid types.UID, pluginName, specName, path string) error {
	plugin, err := m.plugins.FindByName(pluginName)
	if err != nil {
		return err
	}
	spec, err := plugin.ConstructVolumeSpec(specName, path)
	if err != nil {
		return err
	}
	name, _, deviceMountable, err := UniqueVolumeName(m.plugins, spec, uid)
	if err != nil {
		return err
	}
	av := AttachedVolume{Name: name, PluginName: pluginName, Spec: spec, DeviceMountable: deviceMountable, DeviceState: DeviceNotMounted}
	if deviceMountable {
		av.DeviceState = DeviceMountUncertain
		if dm, err := m.plugins.FindDeviceMountable(spec); err == nil && dm != nil {
			if dmr, err := dm.NewDeviceMounter(); err == nil {
				av.DeviceMountPath, _ = dmr.DeviceMountPath(spec)
			}
		}
	}
	m.asw.MarkAttached(av)
	m.asw.SetMountState(MountedVolume{Name: name, PluginName: pluginName, PodUID: uid, SpecName: specName,
		State: VolumeMountUncertain, Reconstructed: true})
	return nil
}
