package wrapped

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/payload"
)

// PayloadFunc builds a volume's files at SetUp time.
type PayloadFunc func(ctx context.Context, args volume.MounterArgs) (payload.Files, error)

// PluginSpec describes a wrapped plugin; NewPlugin does the rest.
type PluginSpec struct {
	Name   string
	Medium v1.StorageMedium
	// Supports is CanSupport.
	Supports func(spec *volume.Spec) bool
	// Source is an empty source of the plugin's type, for reconstruction.
	Source v1.VolumeSource
	// Files builds the files of spec for pod at every SetUp, for plugins whose contents
	// depend on nothing but the API objects (configMap, secret, downwardAPI). Set either
	// Files or NewPayload.
	Files func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (payload.Files, error)
	// NewPayload returns the payload builder of spec for pod, and optionally when the
	// volume must be refreshed (projected: tokens expire).
	NewPayload func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (PayloadFunc, func() time.Duration, error)
}

// NewPlugin returns a volume.Plugin whose volumes are payloads in an emptyDir. Every
// wrapped plugin requires remount: that is how updated objects reach the files.
func NewPlugin(s PluginSpec) volume.Plugin { return &plugin{spec: s} }

type plugin struct {
	spec PluginSpec
	host volume.Host
}

func (p *plugin) Init(h volume.Host) error { p.host = h; return nil }
func (p *plugin) Name() string             { return p.spec.Name }
func (p *plugin) CanSupport(spec *volume.Spec) bool {
	return spec.Volume != nil && p.spec.Supports(spec)
}
func (p *plugin) RequiresRemount(spec *volume.Spec) bool { return true }

func (p *plugin) NewMounter(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	build, refresh, err := p.payload(spec, pod)
	if err != nil {
		return nil, err
	}
	return NewMounter(Config{
		Host: p.host, PluginName: p.spec.Name, VolumeName: spec.Name(), Pod: pod,
		Medium: p.spec.Medium, Payload: build, RefreshAfter: refresh,
	}), nil
}

func (p *plugin) payload(spec *volume.Spec, pod *v1.Pod) (PayloadFunc, func() time.Duration, error) {
	if p.spec.Files == nil {
		return p.spec.NewPayload(p.host, spec, pod)
	}
	return func(context.Context, volume.MounterArgs) (payload.Files, error) {
		return p.spec.Files(p.host, spec, pod)
	}, nil, nil
}

func (p *plugin) NewUnmounter(name string, podUID types.UID) (volume.Unmounter, error) {
	return NewUnmounter(p.host, p.spec.Name, name, podUID)
}

func (p *plugin) ConstructVolumeSpec(name, _ string) (*volume.Spec, error) {
	return volume.SpecFromVolume(&v1.Volume{Name: name, VolumeSource: p.spec.Source}), nil
}
