// Package hostpath is the hostPath volume plugin: a path on the node, checked against its
// type and created when the type says so. Nothing is mounted; the pod sees the path itself.
package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/host-path"

// New returns the plugin.
func New() volume.Plugin { return plugin{} }

// plugin keeps no host: a hostPath volume is the node's own path, with nothing to fetch,
// mount or clean up.
type plugin struct{}

func (plugin) Init(volume.Host) error { return nil }
func (plugin) Name() string           { return PluginName }

func (plugin) CanSupport(spec *volume.Spec) bool {
	return (spec.Volume != nil && spec.Volume.HostPath != nil) ||
		(spec.PersistentVolume != nil && spec.PersistentVolume.Spec.HostPath != nil)
}

func (plugin) RequiresRemount(*volume.Spec) bool { return false }

func (plugin) NewMounter(spec *volume.Spec, _ *v1.Pod) (volume.Mounter, error) {
	src := source(spec)
	if src == nil {
		return nil, fmt.Errorf("volume %q is not a hostPath", spec.Name())
	}
	t := v1.HostPathUnset
	if src.Type != nil {
		t = *src.Type
	}
	return &mounter{path: src.Path, pathType: t, readOnly: spec.ReadOnly}, nil
}

func (plugin) NewUnmounter(string, types.UID) (volume.Unmounter, error) { return unmounter{}, nil }

func (plugin) ConstructVolumeSpec(name, _ string) (*volume.Spec, error) {
	return volume.SpecFromVolume(&v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}}), nil
}

func source(spec *volume.Spec) *v1.HostPathVolumeSource {
	switch {
	case spec.Volume != nil:
		return spec.Volume.HostPath
	case spec.PersistentVolume != nil:
		return spec.PersistentVolume.Spec.HostPath
	}
	return nil
}

type mounter struct {
	path     string
	pathType v1.HostPathType
	readOnly bool
}

func (m *mounter) Path() string { return m.path }

func (m *mounter) Attributes() volume.Attributes { return volume.Attributes{ReadOnly: m.readOnly} }

func (m *mounter) SetUp(context.Context, volume.MounterArgs) error {
	if err := validatePath(m.path); err != nil {
		return err
	}
	return checkType(m.path, m.pathType)
}

// validatePath refuses relative paths and ".." elements, as upstream does.
func validatePath(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("hostPath %q must be absolute", p)
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return fmt.Errorf("hostPath %q must not contain '..'", p)
		}
	}
	return nil
}

// checkType checks path against a hostPath type, creating it for DirectoryOrCreate (0755)
// and FileOrCreate (0644, parent directories 0755).
func checkType(path string, t v1.HostPathType) error {
	info, err := os.Stat(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hostPath %s: %w", path, err)
	}
	switch t {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if !exists {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return fmt.Errorf("hostPath type check failed: create directory %s: %w", path, err)
			}
			return os.Chmod(path, 0o755)
		}
		return want(path, info.IsDir(), "a directory")
	case v1.HostPathFileOrCreate:
		if !exists {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("hostPath type check failed: create %s: %w", filepath.Dir(path), err)
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("hostPath type check failed: create file %s: %w", path, err)
			}
			if f != nil {
				f.Close()
				return os.Chmod(path, 0o644)
			}
			info, err = os.Stat(path)
			if err != nil {
				return err
			}
		}
		return want(path, info.Mode().IsRegular(), "a file")
	}
	if !exists {
		return fmt.Errorf("hostPath type check failed: %s does not exist (type %s)", path, t)
	}
	switch t {
	case v1.HostPathDirectory:
		return want(path, info.IsDir(), "a directory")
	case v1.HostPathFile:
		return want(path, info.Mode().IsRegular(), "a file")
	case v1.HostPathSocket:
		return want(path, info.Mode()&fs.ModeSocket != 0, "a socket")
	case v1.HostPathCharDev:
		return want(path, info.Mode()&fs.ModeCharDevice != 0, "a character device")
	case v1.HostPathBlockDev:
		return want(path, info.Mode()&fs.ModeDevice != 0 && info.Mode()&fs.ModeCharDevice == 0, "a block device")
	}
	return fmt.Errorf("hostPath %s: unknown type %q", path, t)
}

func want(path string, ok bool, what string) error {
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not %s", path, what)
	}
	return nil
}

type unmounter struct{}

func (unmounter) Path() string                   { return "" }
func (unmounter) TearDown(context.Context) error { return nil }
