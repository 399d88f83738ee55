// Package downwardapi is the downwardAPI volume plugin: pod fields and container resources
// as files in a tmpfs, refreshed when the pod's labels or annotations change.
package downwardapi

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/payload"
	"github.com/kubevol/kubevol/pkg/volume/plugins/internal/wrapped"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/downward-api"

// New returns the plugin.
func New() volume.Plugin {
	return wrapped.NewPlugin(wrapped.PluginSpec{
		Name:     PluginName,
		Medium:   v1.StorageMediumMemory,
		Supports: func(s *volume.Spec) bool { return s.Volume.DownwardAPI != nil },
		Source:   v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}},
		Files: func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (payload.Files, error) {
			src := spec.Volume.DownwardAPI
			return payload.DownwardAPI(pod, src.Items, src.DefaultMode, h.NodeAllocatable())
		},
	})
}
