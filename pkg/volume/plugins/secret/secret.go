// Package secret is the secret volume plugin: keys of a Secret as files in a tmpfs, so
// they never reach the node's disk, refreshed when the Secret changes.
package secret

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
		NewPayload: func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (wrapped.PayloadFunc, func() time.Duration, error) {
			src := spec.Volume.Secret
			return func(context.Context, volume.MounterArgs) (payload.Files, error) {
				return Payload(h, pod.Namespace, src.SecretName, src.Items, src.DefaultMode, src.Optional)
			}, nil, nil
		},
	})
}

// Payload builds the files of a secret source. The error never contains secret data.
func Payload(h volume.Host, namespace, name string, items []v1.KeyToPath, defaultMode *int32, optionalPtr *bool) (payload.Files, error) {
	optional := optionalPtr != nil && *optionalPtr
	s, err := h.GetSecret(namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional {
			return payload.Files{}, nil
		}
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %q not found", name)
		}
		return nil, fmt.Errorf("get secret %q: %w", name, err)
	}
	files, err := payload.FromKeys(s.Data, items, defaultMode, optional)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return files, nil
}
