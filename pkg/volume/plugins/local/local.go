// Package local is the plugin of local PersistentVolumes (spec.local): a directory or a
// block device of the node, named by the PV (local-static-provisioner creates them). A
// directory is bind-mounted into each pod; a block device is formatted if blank and mounted
// once per node, then bind-mounted; a Block-mode PV maps the device itself.
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/kubevol/kubevol/pkg/volume"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/local-volume"

// New returns the plugin.
func New() volume.Plugin { return &plugin{} }

type plugin struct{ host volume.Host }

var (
	_ volume.DeviceMountablePlugin = (*plugin)(nil)
	_ volume.BlockPlugin           = (*plugin)(nil)
)

func (p *plugin) Init(h volume.Host) error { p.host = h; return nil }
func (p *plugin) Name() string             { return PluginName }

func (p *plugin) CanSupport(spec *volume.Spec) bool {
	return spec.PersistentVolume != nil && spec.PersistentVolume.Spec.Local != nil
}

func (p *plugin) RequiresRemount(*volume.Spec) bool { return false }

// VolumeName is the PV name: one local volume is one PV (upstream GetVolumeName).
func (p *plugin) VolumeName(spec *volume.Spec) (string, error) {
	if !p.CanSupport(spec) {
		return "", fmt.Errorf("volume %q is not a local volume", spec.Name())
	}
	return spec.PersistentVolume.Name, nil
}

func (p *plugin) CanDeviceMount(*volume.Spec) (bool, error) { return true, nil }

func (p *plugin) NewDeviceMounter() (volume.DeviceMounter, error)     { return deviceMounter{p}, nil }
func (p *plugin) NewDeviceUnmounter() (volume.DeviceUnmounter, error) { return deviceMounter{p}, nil }

// DeviceMountRefs: only a formatted block device has a global mount; the pods' bind mounts
// of it must go before it is unmounted.
func (p *plugin) DeviceMountRefs(path string) ([]string, error) {
	if !p.isGlobalMount(path) {
		return nil, nil
	}
	if mnt, err := p.host.Mounter().IsLikelyNotMountPoint(path); err != nil || mnt {
		return nil, nil
	}
	return p.host.Mounter().GetMountRefs(path)
}

// mountsDir holds the global mounts of block devices used as filesystems (the kubelet's
// plugins/kubernetes.io/local-volume/mounts/<pv>).
func (p *plugin) mountsDir() string {
	return filepath.Join(p.host.Paths().PluginDir(PluginName), "mounts")
}

func (p *plugin) isGlobalMount(path string) bool { return filepath.Dir(path) == p.mountsDir() }

// checkPath makes the kubelet's checks of a local volume's path: set, absolute, without
// ".." elements, existing, and a directory or a block device.
func checkPath(pv string, path string) (os.FileInfo, error) {
	switch {
	case path == "":
		return nil, fmt.Errorf("local volume %q: path is empty", pv)
	case !filepath.IsAbs(path):
		return nil, fmt.Errorf("local volume %q: path %q is not absolute", pv, path)
	}
	for _, e := range strings.Split(path, "/") {
		if e == ".." {
			return nil, fmt.Errorf("local volume %q: invalid path %q: must not contain '..'", pv, path)
		}
	}
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local volume %q: path %q does not exist", pv, path)
	}
	if err != nil {
		return nil, fmt.Errorf("local volume %q: %w", pv, err)
	}
	if !info.IsDir() && !isBlockDevice(info) {
		return nil, fmt.Errorf("local volume %q: path %q is neither a directory nor a block device", pv, path)
	}
	return info, nil
}

func isBlockDevice(info os.FileInfo) bool {
	return info.Mode()&os.ModeDevice != 0 && info.Mode()&os.ModeCharDevice == 0
}

type deviceMounter struct{ p *plugin }

// DeviceMountPath is the directory itself, or for a block device its global mount.
func (d deviceMounter) DeviceMountPath(spec *volume.Spec) (string, error) {
	if !d.p.CanSupport(spec) {
		return "", fmt.Errorf("volume %q is not a local volume", spec.Name())
	}
	path := spec.PersistentVolume.Spec.Local.Path
	if info, err := os.Stat(path); err == nil && isBlockDevice(info) && !spec.Block() {
		return filepath.Join(d.p.mountsDir(), spec.PersistentVolume.Name), nil
	}
	return path, nil
}

// MountDevice checks the path; a block device used as a filesystem is formatted with the
// PV's fsType (ext4 by default) when it has none, and mounted at its global mount.
func (d deviceMounter) MountDevice(_ context.Context, spec *volume.Spec, _, deviceMountPath string, _ volume.MounterArgs) error {
	local := spec.PersistentVolume.Spec.Local
	info, err := checkPath(spec.PersistentVolume.Name, local.Path)
	if err != nil {
		return err
	}
	if info.IsDir() || spec.Block() {
		return nil
	}
	m := d.p.host.Mounter()
	if mnt, err := m.IsLikelyNotMountPoint(deviceMountPath); err == nil && !mnt {
		return nil
	}
	if err := os.MkdirAll(deviceMountPath, 0o750); err != nil {
		return err
	}
	fsType := "ext4"
	if local.FSType != nil && *local.FSType != "" {
		fsType = *local.FSType
	}
	sfm := &mount.SafeFormatAndMount{Interface: m, Exec: utilexec.New()}
	if err := sfm.FormatAndMount(local.Path, deviceMountPath, fsType, spec.PersistentVolume.Spec.MountOptions); err != nil {
		_ = os.Remove(deviceMountPath)
		return fmt.Errorf("local volume %q: format and mount %s at %s: %w", spec.PersistentVolume.Name, local.Path, deviceMountPath, err)
	}
	return nil
}

// UnmountDevice unmounts a block device's global mount; a directory has nothing to undo.
func (d deviceMounter) UnmountDevice(_ context.Context, path string) error {
	if !d.p.isGlobalMount(path) {
		return nil
	}
	if err := mount.CleanupMountPoint(path, d.p.host.Mounter(), false); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

func (p *plugin) NewMounter(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	if !p.CanSupport(spec) {
		return nil, fmt.Errorf("volume %q is not a local volume", spec.Name())
	}
	return &mounter{p: p, spec: spec, pod: pod, dir: p.host.Paths().PodVolumeDir(pod.UID, PluginName, spec.Name())}, nil
}

func (p *plugin) NewUnmounter(name string, uid types.UID) (volume.Unmounter, error) {
	return &unmounter{p: p, dir: p.host.Paths().PodVolumeDir(uid, PluginName, name)}, nil
}

// ConstructVolumeSpec rebuilds the PV from the pod's bind mount: its source is the global
// path (the directory, or the global mount of a block device).
func (p *plugin) ConstructVolumeSpec(name, dir string) (*volume.Spec, error) {
	src, err := bindSource(dir, p.host.Paths().PodsDir())
	if err != nil {
		return nil, fmt.Errorf("local volume %q: %w", name, err)
	}
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			Local: &v1.LocalVolumeSource{Path: src},
		}},
	}, false), nil
}

type mounter struct {
	p    *plugin
	spec *volume.Spec
	pod  *v1.Pod
	dir  string
}

func (m *mounter) Path() string { return m.dir }

func (m *mounter) Attributes() volume.Attributes {
	return volume.Attributes{ReadOnly: m.spec.ReadOnly, Managed: !m.spec.ReadOnly}
}

// SetUp bind-mounts the global path into the pod's directory (read-only when the claim is,
// with the PV's mountOptions) and applies fsGroup to a writable volume when no other pod has
// it mounted, as upstream's local plugin: the first pod's group stays, and a pod asking for
// another one gets the Warning event AlreadyMountedVolume.
func (m *mounter) SetUp(_ context.Context, args volume.MounterArgs) error {
	global, err := deviceMounter{m.p}.DeviceMountPath(m.spec)
	if err != nil {
		return err
	}
	if _, err := checkPath(m.spec.Name(), m.spec.PersistentVolume.Spec.Local.Path); err != nil {
		return err
	}
	mnt := m.p.host.Mounter()
	if notMnt, err := mnt.IsLikelyNotMountPoint(m.dir); err == nil && !notMnt {
		return nil
	}
	// Other pods' bind mounts of the volume, looked at before this one is made.
	var others bool
	if args.FsGroup != nil {
		refs, err := mnt.GetMountRefs(global)
		if err != nil {
			return fmt.Errorf("local volume %q: mounts of %s: %w", m.spec.Name(), global, err)
		}
		pods := m.p.host.Paths().PodsDir() + string(filepath.Separator)
		for _, r := range refs {
			if r != m.dir && strings.HasPrefix(r, pods) {
				others = true
			}
		}
		if others {
			if err := m.warnOtherGroup(global, *args.FsGroup); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return err
	}
	opts := []string{"bind"}
	if m.spec.ReadOnly {
		opts = append(opts, "ro")
	}
	for _, o := range m.spec.PersistentVolume.Spec.MountOptions {
		if !slices.Contains(opts, o) {
			opts = append(opts, o)
		}
	}
	if err := mnt.Mount(global, m.dir, "", opts); err != nil {
		_ = os.Remove(m.dir)
		return fmt.Errorf("bind mount %s at %s: %w", global, m.dir, err)
	}
	if !m.spec.ReadOnly && !others {
		if err := volume.SetOwnership(m.dir, args.FsGroup, false, args.FSGroupChangePolicy); err != nil {
			_ = mount.CleanupMountPoint(m.dir, mnt, false)
			return err
		}
	}
	return nil
}

// warnOtherGroup posts upstream's AlreadyMountedVolume event when the volume, mounted for
// other pods, does not have the group fsGroup this pod asks for: the pod shares the volume
// with the first pod's group.
func (m *mounter) warnOtherGroup(global string, fsGroup int64) error {
	info, err := os.Stat(global)
	if err != nil {
		return fmt.Errorf("failed to check fsGroup for %s (%v)", global, err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("failed to check fsGroup for %s (no owner)", global)
	}
	if int64(st.Gid) != fsGroup {
		m.p.host.Recorder().Eventf(m.pod, v1.EventTypeWarning, "AlreadyMountedVolume",
			"The requested fsGroup is %d, but the volume %s has GID %d. The volume may not be shareable.", fsGroup, m.spec.Name(), st.Gid)
	}
	return nil
}

type unmounter struct {
	p   *plugin
	dir string
}

func (u *unmounter) Path() string { return u.dir }

func (u *unmounter) TearDown(context.Context) error {
	return mount.CleanupMountPoint(u.dir, u.p.host.Mounter(), false)
}
