// Package image is the plugin of image volumes (pod volumes with an image source): the
// container runtime pulls the OCI image and mounts it into the containers, so on the node's
// side there is nothing to set up, as with the kubelet's own image plugin. The plugin
// exists so that such a pod's volumes are ready (instead of "no volume plugin supports
// volume") and a runtime embedding the volume manager sees the volume in its state; Path is
// empty because there is no directory on the node to hand to the runtime.
package image

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/image"

// New returns the plugin.
func New() volume.Plugin { return plugin{} }

type plugin struct{}

func (plugin) Init(volume.Host) error { return nil }
func (plugin) Name() string           { return PluginName }

func (plugin) CanSupport(spec *volume.Spec) bool {
	return spec.Volume != nil && spec.Volume.Image != nil
}

func (plugin) RequiresRemount(*volume.Spec) bool { return false }

func (plugin) NewMounter(spec *volume.Spec, _ *v1.Pod) (volume.Mounter, error) {
	if spec.Volume == nil || spec.Volume.Image == nil {
		return nil, fmt.Errorf("volume %q is not an image volume", spec.Name())
	}
	return noop{}, nil
}

func (plugin) NewUnmounter(string, types.UID) (volume.Unmounter, error) { return noop{}, nil }

// ConstructVolumeSpec is never needed: an image volume leaves nothing on the node's disk.
func (plugin) ConstructVolumeSpec(name, _ string) (*volume.Spec, error) {
	return volume.SpecFromVolume(&v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{}}}), nil
}

// noop sets up and tears down nothing; image volumes are always read-only.
type noop struct{}

func (noop) Path() string                                    { return "" }
func (noop) SetUp(context.Context, volume.MounterArgs) error { return nil }
func (noop) TearDown(context.Context) error                  { return nil }
func (noop) Attributes() volume.Attributes                   { return volume.Attributes{ReadOnly: true} }
