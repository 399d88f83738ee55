// Package configmap is the configMap volume plugin: keys of a ConfigMap (data and
// binaryData) as files in a disk-backed emptyDir, refreshed when the ConfigMap changes.
package configmap

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/payload"
	"github.com/kubevol/kubevol/pkg/volume/plugins/internal/wrapped"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/configmap"

// New returns the plugin. configMap volumes are on disk, as upstream (tmpfs would be
// charged to the pod's memory).
func New() volume.Plugin {
	return wrapped.NewPlugin(wrapped.PluginSpec{
		Name:     PluginName,
		Supports: func(s *volume.Spec) bool { return s.Volume.ConfigMap != nil },
		Source:   v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}},
		Files: func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (payload.Files, error) {
			return Payload(h, pod.Namespace, spec.Volume.ConfigMap)
		},
	})
}

// Payload builds the files of src in namespace.
func Payload(h volume.Host, namespace string, src *v1.ConfigMapVolumeSource) (payload.Files, error) {
	get := func() (map[string][]byte, error) {
		cm, err := h.GetConfigMap(namespace, src.Name)
		if err != nil {
			return nil, err
		}
		return payload.ConfigMapData(cm), nil
	}
	return payload.FromObject("configmap", src.Name, get, src.Items, src.DefaultMode, src.Optional != nil && *src.Optional)
}
