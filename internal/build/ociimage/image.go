package ociimage

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what an image runs: the parts of an OCI image config a Dockerfile would set.
type Config struct {
	Entrypoint []string
	Cmd        []string
	// User is "uid" or "uid:gid"; numeric, so that runAsNonRoot can check it without
	// reading /etc/passwd.
	User       string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// Platform is one os/architecture pair of an index.
type Platform struct {
	OS, Architecture, Variant string
}

func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// New returns an OCI image for one platform: the layers in order (base first) and the
// config. Its creation time and the history are fixed, so the digest depends only on the
// inputs.
func New(p Platform, cfg Config, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "kubevol internal/build/ociimage"},
		})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = p.OS
	cf.Architecture = p.Architecture
	cf.Variant = p.Variant
	cf.Created = v1.Time{Time: Epoch}
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Cmd = cfg.Cmd
	cf.Config.User = cfg.User
	cf.Config.Env = cfg.Env
	cf.Config.WorkingDir = cfg.WorkingDir
	cf.Config.Labels = cfg.Labels
	return mutate.ConfigFile(img, cf)
}

// Index returns an OCI image index of one image per platform, in the order given.
func Index(images map[Platform]v1.Image, order []Platform) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, 0, len(order))
	for _, p := range order {
		img, ok := images[p]
		if !ok {
			return nil, fmt.Errorf("index: no image for %s", p)
		}
		p := p
		adds = append(adds, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant},
			},
		})
	}
	return mutate.AppendManifests(idx, adds...), nil
}
