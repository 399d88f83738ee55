package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
)

// A Block-mode local PV is the device itself, mapped for each pod:
//
//	plugins/kubernetes.io/local-volume/volumeDevices/<pv>/<pod uid>   bind mount of the device
//	pods/<uid>/volumeDevices/kubernetes.io~local-volume/<pv>          symlink to it
//
// The per-pod bind mount is the reference that the pod still maps the device, as the
// kubelet's global map path.

func (p *plugin) devRef(pv string, uid types.UID) string {
	return filepath.Join(p.host.Paths().PluginDir(PluginName), "volumeDevices", pv, string(uid))
}

func (p *plugin) NewBlockMapper(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	if !p.CanSupport(spec) || !spec.Block() {
		return nil, fmt.Errorf("volume %q is not a local block volume", spec.Name())
	}
	return &blockMapper{p: p, spec: spec, uid: pod.UID}, nil
}

func (p *plugin) NewBlockUnmapper(name string, uid types.UID) (volume.Unmounter, error) {
	return &blockUnmapper{p: p, pv: name, uid: uid}, nil
}

// ConstructBlockVolumeSpec finds the device again from the pod's bind mount of it.
func (p *plugin) ConstructBlockVolumeSpec(name, mapPath string) (*volume.Spec, error) {
	ref, err := os.Readlink(mapPath)
	if err != nil {
		return nil, err
	}
	dev, err := bindSource(ref, p.host.Paths().PodsDir(), filepath.Join(p.host.Paths().PluginDir(PluginName), "volumeDevices"))
	if err != nil {
		return nil, fmt.Errorf("local volume %q: %w", name, err)
	}
	mode := v1.PersistentVolumeBlock
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{VolumeMode: &mode, PersistentVolumeSource: v1.PersistentVolumeSource{
			Local: &v1.LocalVolumeSource{Path: dev},
		}},
	}, false), nil
}

type blockMapper struct {
	p    *plugin
	spec *volume.Spec
	uid  types.UID
}

func (b *blockMapper) Path() string {
	return b.p.host.Paths().PodVolumeDevicePath(b.uid, PluginName, b.spec.Name())
}

func (b *blockMapper) Attributes() volume.Attributes {
	return volume.Attributes{ReadOnly: b.spec.ReadOnly}
}

// SetUp maps the device: a Block-mode local PV must name a block device.
func (b *blockMapper) SetUp(context.Context, volume.MounterArgs) error {
	dev := b.spec.PersistentVolume.Spec.Local.Path
	info, err := checkPath(b.spec.Name(), dev)
	if err != nil {
		return err
	}
	if !isBlockDevice(info) {
		return fmt.Errorf("local volume %q: volumeMode Block needs a block device, %q is a directory", b.spec.Name(), dev)
	}
	ref := b.p.devRef(b.spec.Name(), b.uid)
	m := b.p.host.Mounter()
	if notMnt, err := m.IsLikelyNotMountPoint(ref); err != nil || notMnt {
		if err := os.MkdirAll(filepath.Dir(ref), 0o750); err != nil {
			return err
		}
		f, err := os.OpenFile(ref, os.O_CREATE|os.O_RDONLY, 0o640)
		if err != nil {
			return err
		}
		_ = f.Close()
		if err := m.Mount(dev, ref, "", []string{"bind"}); err != nil {
			_ = os.Remove(ref)
			return fmt.Errorf("bind mount of device %s at %s: %w", dev, ref, err)
		}
	}
	return volume.ReplaceSymlink(ref, b.Path())
}

type blockUnmapper struct {
	p   *plugin
	pv  string
	uid types.UID
}

func (u *blockUnmapper) Path() string {
	return u.p.host.Paths().PodVolumeDevicePath(u.uid, PluginName, u.pv)
}

// TearDown removes the pod's link and its bind mount; each step tolerates being done.
func (u *blockUnmapper) TearDown(context.Context) error {
	if err := os.Remove(u.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ref := u.p.devRef(u.pv, u.uid)
	if err := mount.CleanupMountPoint(ref, u.p.host.Mounter(), false); err != nil {
		return err
	}
	if err := os.Remove(filepath.Dir(ref)); err != nil && !errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "not empty") {
		return err
	}
	return nil
}

// bindSource is the path that the bind mount at target shows: the mount point of another
// mount of the same filesystem whose root contains target's root, plus the rest of the
// path (for a device file under devtmpfs, /dev/<name>). Mounts below skip (other pods'
// binds of the same volume) are not sources.
func bindSource(target string, skip ...string) (string, error) {
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	var self *mount.MountInfo
	for i := range infos {
		if infos[i].MountPoint == target {
			self = &infos[i]
		}
	}
	if self == nil {
		return "", fmt.Errorf("%s is not mounted", target)
	}
	best, bestRoot := "", ""
	for _, mi := range infos {
		if mi.Major != self.Major || mi.Minor != self.Minor || mi.MountPoint == target || under(mi.MountPoint, skip) {
			continue
		}
		root := strings.TrimSuffix(mi.Root, "/")
		if root != "" && self.Root != root && !strings.HasPrefix(self.Root, root+"/") {
			continue
		}
		if best == "" || len(root) > len(bestRoot) {
			best, bestRoot = filepath.Join(mi.MountPoint, strings.TrimPrefix(self.Root, root)), root
		}
	}
	if best == "" {
		return "", fmt.Errorf("cannot find the source of the bind mount at %s", target)
	}
	return best, nil
}

func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}
