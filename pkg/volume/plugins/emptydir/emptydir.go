// Package emptydir is the emptyDir volume plugin: a directory on the node's disk, or a
// tmpfs for medium Memory, sized like the kubelet does (the least of sizeLimit, the pod's
// memory limit and the node's allocatable memory).
package emptydir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/runtime/sizes"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/removeall"
)

// PluginName is the upstream plugin name, which also names the on-disk directory.
const PluginName = "kubernetes.io/empty-dir"

const readyFile = "ready"

// New returns the plugin.
func New() volume.Plugin { return &plugin{} }

type plugin struct{ host volume.Host }

func (p *plugin) Init(h volume.Host) error { p.host = h; return nil }
func (p *plugin) Name() string             { return PluginName }

func (p *plugin) CanSupport(spec *volume.Spec) bool {
	return spec.Volume != nil && spec.Volume.EmptyDir != nil
}

func (p *plugin) RequiresRemount(*volume.Spec) bool { return false }

func (p *plugin) NewMounter(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	ed := spec.Volume.EmptyDir
	m := &mounter{
		unmounter: p.unmounter(spec.Name(), pod.UID),
		medium:    ed.Medium,
	}
	switch {
	case ed.Medium == v1.StorageMediumDefault, ed.Medium == v1.StorageMediumMemory:
	case isHugePages(ed.Medium):
		size, err := hugePageSize(ed.Medium, pod)
		if err != nil {
			return nil, err
		}
		m.pageSize = size.String()
	default:
		return nil, fmt.Errorf("emptyDir %q: medium %q is not supported", spec.Name(), ed.Medium)
	}
	if ed.Medium == v1.StorageMediumMemory {
		m.size = MemorySize(pod, ed.SizeLimit, p.host.NodeAllocatable())
	}
	return m, nil
}

func (p *plugin) NewUnmounter(name string, podUID types.UID) (volume.Unmounter, error) {
	return p.unmounter(name, podUID), nil
}

func (p *plugin) unmounter(name string, podUID types.UID) *unmounter {
	paths := p.host.Paths()
	return &unmounter{
		path:     paths.PodVolumeDir(podUID, PluginName, name),
		readyDir: paths.PodPluginDir(podUID, PluginName, name),
		mounter:  p.host.Mounter(),
	}
}

func (p *plugin) ConstructVolumeSpec(name, _ string) (*volume.Spec, error) {
	return volume.SpecFromVolume(&v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}), nil
}

// MemorySize is the size of a memory-backed emptyDir: the least of sizeLimit, the pod's
// memory limit and the node's allocatable memory (upstream SizeMemoryBackedVolumes). Nil
// means no size is known, so the kernel default (half the RAM) applies.
func MemorySize(pod *v1.Pod, sizeLimit *resource.Quantity, allocatable v1.ResourceList) *resource.Quantity {
	var size *resource.Quantity
	if q, ok := allocatable[v1.ResourceMemory]; ok && !q.IsZero() {
		size = &q
	}
	if q, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceMemory]; ok && !q.IsZero() {
		if size == nil || q.Cmp(*size) < 0 {
			size = &q
		}
	}
	// A sizeLimit CSI-style bytes cannot hold (1e30, 8Ei) limits nothing: checked first, as
	// comparing a quantity such as 1e10000000 costs seconds.
	if _, err := sizes.Bytes("sizeLimit", ptrOrZero(sizeLimit)); err == nil && (size == nil || sizeLimit.Cmp(*size) < 0) {
		q := sizeLimit.DeepCopy()
		size = &q
	}
	return size
}

func ptrOrZero(q *resource.Quantity) resource.Quantity {
	if q == nil {
		return resource.Quantity{}
	}
	return *q
}

// tmpfsOptions are the size= option for a tmpfs of size q, if any. As the kubelet, only a
// positive size in int64 is passed; the kubelet's Value() wraps a larger one or makes it 0,
// which for tmpfs means no limit at all, so such a size falls back to the kernel's default
// (half the RAM) here, and so does 8Ei, the value Kubernetes stores for anything larger.
// A fraction of a byte rounds up, as Value() does.
func tmpfsOptions(q *resource.Quantity) ([]string, error) {
	if q == nil {
		return nil, nil
	}
	b, err := sizes.Bytes("emptyDir memory size", *q)
	if err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("size=%d", b)}, nil
}

type unmounter struct {
	path     string
	readyDir string
	mounter  mount.Interface
}

type mounter struct {
	*unmounter
	medium v1.StorageMedium
	size   *resource.Quantity
	// pageSize is the hugetlbfs page size of a HugePages medium.
	pageSize string
}

func (u *unmounter) Path() string { return u.path }

func (m *mounter) Attributes() volume.Attributes { return volume.Attributes{Managed: true} }

func (m *mounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	return m.SetUpAt(ctx, m.path, args)
}

// SetUpAt is idempotent through the ready marker, as upstream: a volume that is ready and,
// for Memory, still a tmpfs is left alone, so a remount or a restart keeps its data.
func (m *mounter) SetUpAt(ctx context.Context, dir string, args volume.MounterArgs) error {
	ready := isReady(m.readyDir)
	if ready {
		switch {
		case m.pageSize != "":
			if m.isMountOf(dir, unix.HUGETLBFS_MAGIC) {
				return nil
			}
		case m.medium != v1.StorageMediumMemory:
			if _, err := os.Stat(dir); err == nil {
				return nil
			}
		case m.isTmpfsMount(dir):
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if m.medium == v1.StorageMediumMemory && !m.isTmpfsMount(dir) {
		opts, err := tmpfsOptions(m.size)
		if err != nil {
			klog.FromContext(ctx).Info("The emptyDir's tmpfs gets the kernel's default size", "dir", dir, "reason", err.Error())
		}
		if err := m.mounter.MountSensitiveWithoutSystemd("tmpfs", dir, "tmpfs", opts, nil); err != nil {
			return err
		}
	}
	if m.pageSize != "" && !m.isMountOf(dir, unix.HUGETLBFS_MAGIC) {
		if err := m.mounter.MountSensitiveWithoutSystemd("nodev", dir, "hugetlbfs", []string{"pagesize=" + m.pageSize}, nil); err != nil {
			return err
		}
	}
	// 0777 despite the umask: every container user must be able to write. As the kubelet,
	// only the permission bits are compared, so a tmpfs keeps the sticky bit of its default
	// mode (1777) and a directory keeps the setgid bit an earlier fsGroup gave it.
	if info, err := os.Stat(dir); err != nil {
		return err
	} else if info.Mode().Perm() != 0o777 {
		if err := os.Chmod(dir, 0o777); err != nil {
			return err
		}
	}
	if err := volume.SetOwnership(dir, args.FsGroup, false, nil); err != nil {
		return err
	}
	return setReady(m.readyDir)
}

func (u *unmounter) TearDown(ctx context.Context) error { return u.TearDownAt(ctx, u.path) }

func (u *unmounter) TearDownAt(_ context.Context, dir string) error {
	if err := removeall.All(u.readyDir); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	notMnt, err := u.mounter.IsLikelyNotMountPoint(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !notMnt {
		if err := u.mounter.Unmount(dir); err != nil {
			return err
		}
	}
	// Not os.RemoveAll: a mount left inside the volume (one this check cannot see, or one
	// made since) keeps its data; the error names it.
	return removeall.All(dir)
}

// isTmpfsMount: dir is a mount point and a tmpfs (the root dir itself may live on one).
func (u *unmounter) isTmpfsMount(dir string) bool { return u.isMountOf(dir, unix.TMPFS_MAGIC) }

// isMountOf: dir is a mount point of the filesystem type magic (statfs).
func (u *unmounter) isMountOf(dir string, magic int64) bool {
	notMnt, err := u.mounter.IsLikelyNotMountPoint(dir)
	if err != nil || notMnt {
		return false
	}
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && int64(st.Type) == magic
}

func isReady(dir string) bool {
	info, err := os.Stat(filepath.Join(dir, readyFile))
	return err == nil && info.Mode().IsRegular()
}

func setReady(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, readyFile), nil, 0o600)
}
