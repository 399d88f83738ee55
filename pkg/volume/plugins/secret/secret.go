// Package secret is the secret volume plugin: keys of a Secret as files in a tmpfs, so
// they never reach the node's disk, refreshed when the Secret changes.
package secret

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/payload"
	"github.com/kubevol/kubevol/pkg/volume/plugins/internal/wrapped"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/secret"

// New returns the plugin.
func New() volume.Plugin {
	return wrapped.NewPlugin(wrapped.PluginSpec{
		Name:     PluginName,
		Medium:   v1.StorageMediumMemory,
		Supports: func(s *volume.Spec) bool { return s.Volume.Secret != nil },
		Source:   v1.VolumeSource{Secret: &v1.SecretVolumeSource{}},
		Files: func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (payload.Files, error) {
			src := spec.Volume.Secret
			return Payload(h, pod.Namespace, src.SecretName, src.Items, src.DefaultMode, src.Optional)
		},
	})
}

// Payload builds the files of a secret source.
func Payload(h volume.Host, namespace, name string, items []v1.KeyToPath, defaultMode *int32, optional *bool) (payload.Files, error) {
	get := func() (map[string][]byte, error) {
		s, err := h.GetSecret(namespace, name)
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
	return payload.FromObject("secret", name, get, items, defaultMode, optional != nil && *optional)
}
