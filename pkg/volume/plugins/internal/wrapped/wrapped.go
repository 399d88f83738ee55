// Package wrapped is the common shape of configMap, secret, downwardAPI and projected
// volumes: an emptyDir (tmpfs for the ones holding secrets) into which a payload is
// published with the atomic writer (upstream: NewWrapperMounter + AtomicWriter).
package wrapped

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/atomicwriter"
	"github.com/kubevol/kubevol/pkg/volume/payload"
)

// Config describes one wrapped volume of one pod.
type Config struct {
	Host       volume.Host
	PluginName string
	VolumeName string
	Pod        *v1.Pod
	Medium     v1.StorageMedium
	// Payload builds the files. It is called before anything is created on disk, so a bad
	// item or a missing object leaves nothing behind.
	Payload func(ctx context.Context, args volume.MounterArgs) (payload.Files, error)
	// RefreshAfter, if set, tells the volume manager when to set the volume up again.
	RefreshAfter func() time.Duration
}

// Mounter sets a wrapped volume up.
type Mounter struct{ cfg Config }

// NewMounter returns the Mounter of cfg.
func NewMounter(cfg Config) *Mounter { return &Mounter{cfg: cfg} }

func (m *Mounter) Path() string {
	return m.cfg.Host.Paths().PodVolumeDir(m.cfg.Pod.UID, m.cfg.PluginName, m.cfg.VolumeName)
}

func (m *Mounter) Attributes() volume.Attributes {
	return volume.Attributes{ReadOnly: true, Managed: true}
}

// RefreshAfter implements volume.Refresher.
func (m *Mounter) RefreshAfter() time.Duration {
	if m.cfg.RefreshAfter == nil {
		return 0
	}
	return m.cfg.RefreshAfter()
}

func (m *Mounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	files, err := m.cfg.Payload(ctx, args)
	if err != nil {
		return err
	}
	dir := m.Path()
	_, statErr := os.Lstat(dir)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	wrapper, err := m.cfg.Host.NewWrapperMounter(m.cfg.VolumeName, emptyDir(m.cfg.Medium), m.cfg.Pod)
	if err != nil {
		return err
	}
	if err := wrapper.SetUpAt(ctx, dir, volume.MounterArgs{}); err != nil {
		return err
	}
	err = atomicwriter.Write(dir, files, func(tsDir string) error {
		return volume.SetOwnership(filepath.Join(dir, tsDir), args.FsGroup, true, nil)
	})
	if err != nil && fresh {
		// Nothing of a first SetUp that failed may stay behind (upstream cleans up too).
		if u, uerr := NewUnmounter(m.cfg.Host, m.cfg.PluginName, m.cfg.VolumeName, m.cfg.Pod.UID); uerr == nil {
			_ = u.TearDown(ctx)
		}
	}
	return err
}

// Unmounter tears a wrapped volume down.
type Unmounter struct {
	path    string
	wrapper volume.WrappableUnmounter
}

// NewUnmounter returns the Unmounter of a wrapped volume of a pod.
func NewUnmounter(h volume.Host, pluginName, volumeName string, podUID types.UID) (*Unmounter, error) {
	w, err := h.NewWrapperUnmounter(volumeName, emptyDir(""), podUID)
	if err != nil {
		return nil, err
	}
	return &Unmounter{path: h.Paths().PodVolumeDir(podUID, pluginName, volumeName), wrapper: w}, nil
}

func (u *Unmounter) Path() string { return u.path }

func (u *Unmounter) TearDown(ctx context.Context) error { return u.wrapper.TearDownAt(ctx, u.path) }

func emptyDir(medium v1.StorageMedium) *volume.Spec {
	return volume.SpecFromVolume(&v1.Volume{VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium}}})
}
