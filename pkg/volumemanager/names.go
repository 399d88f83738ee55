package volumemanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// uniqueVolumeName follows upstream, because node.status.volumesInUse uses it:
// "<plugin>/<volume name>" for device-mountable volumes (e.g.
// "kubernetes.io/csi/<driver>^<handle>"), "<plugin>/<pod uid>-<spec name>" otherwise.
func uniqueVolumeName(pm *volume.PluginManager, spec *volume.Spec, podUID types.UID) (name v1.UniqueVolumeName, plugin volume.Plugin, deviceMountable bool, err error) {
	plugin, err = pm.FindBySpec(spec)
	if err != nil {
		return "", nil, false, err
	}
	dm, err := pm.FindDeviceMountable(spec)
	if err != nil {
		return "", nil, false, err
	}
	if dm != nil {
		n, err := dm.VolumeName(spec)
		if err != nil {
			return "", nil, false, err
		}
		return v1.UniqueVolumeName(plugin.Name() + "/" + n), plugin, true, nil
	}
	return podScopedName(plugin.Name(), podUID, spec.Name()), plugin, false, nil
}

func podScopedName(plugin string, podUID types.UID, specName string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(plugin + "/" + string(podUID) + "-" + specName)
}
