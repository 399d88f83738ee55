package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/pkg/volume"
)

// Block volumes use the kubelet's csi_block.go layout, keyed by PV name:
//
//	plugins/kubernetes.io/csi/volumeDevices/staging/<pv>             NodeStage staging_target_path
//	plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<pod uid>   NodePublish target_path (a file)
//	plugins/kubernetes.io/csi/volumeDevices/<pv>/data/vol_data.json  driver and handle
//	plugins/kubernetes.io/csi/volumeDevices/<pv>/dev/<pod uid>       bind mount of the published device
//	pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>                  symlink to the published device
//
// The per-pod bind mount under dev/ is the kubelet's reference that a pod still maps the
// device: UnmountDevice (NodeUnstage) waits until none is left.

func (p *csiPlugin) blockRoot() string {
	return filepath.Join(p.host.Paths().PluginDir(PluginName), "volumeDevices")
}

func (p *csiPlugin) blockDataDir(pv string) string { return filepath.Join(p.blockRoot(), pv, "data") }

func (p *csiPlugin) blockDevDir(pv string) string { return filepath.Join(p.blockRoot(), pv, "dev") }

func (p *csiPlugin) blockPublishPath(pv string, uid types.UID) string {
	return TargetPath(p.host.Paths(), uid, pv, true)
}

// isBlockStaging reports whether path is a block volume's staging path.
func (p *csiPlugin) isBlockStaging(path string) bool {
	return filepath.Dir(path) == filepath.Join(p.blockRoot(), "staging")
}

// NewBlockMapper implements volume.BlockPlugin.
func (p *csiPlugin) NewBlockMapper(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	src, err := sourceOf(spec)
	if err != nil {
		return nil, err
	}
	if !src.block {
		return nil, fmt.Errorf("volume %q is not a block volume", spec.Name())
	}
	return &blockMapper{p: p, spec: spec, pod: pod, src: src}, nil
}

// NewBlockUnmapper implements volume.BlockPlugin.
func (p *csiPlugin) NewBlockUnmapper(volumeName string, podUID types.UID) (volume.Unmounter, error) {
	return &blockUnmapper{p: p, pv: volumeName, uid: podUID}, nil
}

// ConstructBlockVolumeSpec implements volume.BlockPlugin from the volume's data file.
func (p *csiPlugin) ConstructBlockVolumeSpec(volumeName, _ string) (*volume.Spec, error) {
	data, err := readVolData(p.blockDataDir(volumeName))
	if err != nil {
		return nil, err
	}
	mode := v1.PersistentVolumeBlock
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: volumeName},
		Spec: v1.PersistentVolumeSpec{VolumeMode: &mode, PersistentVolumeSource: v1.PersistentVolumeSource{
			CSI: &v1.CSIPersistentVolumeSource{Driver: data.DriverName, VolumeHandle: data.VolumeHandle},
		}},
	}, false), nil
}

// blockMapper publishes a block volume for one pod and maps it: the kubelet's
// csiBlockMapper.MapPodDevice followed by util.MapBlockVolume.
type blockMapper struct {
	p    *csiPlugin
	spec *volume.Spec
	pod  *v1.Pod
	src  source
}

func (b *blockMapper) Path() string {
	return b.p.host.Paths().PodVolumeDevicePath(b.pod.UID, PluginName, b.spec.Name())
}

func (b *blockMapper) Attributes() volume.Attributes {
	return volume.Attributes{ReadOnly: b.src.readOnly}
}

// SetUp implements volume.Mounter: NodePublishVolume to the publish path, then the pod's
// bind mount under dev/ and its symlink. fsGroup does not apply to a raw device.
func (b *blockMapper) SetUp(ctx context.Context, _ volume.MounterArgs) error {
	pv, uid := b.spec.Name(), b.pod.UID
	pub, err := b.p.newPublish(ctx, b.spec, b.pod, b.src, volume.MounterArgs{})
	if err != nil {
		return err
	}
	if err := writeVolData(b.p.blockDataDir(pv), pub.data); err != nil {
		return err
	}
	target := b.p.blockPublishPath(pv, uid)
	// The kubelet creates the target's parent; the driver creates the target file.
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	pub.req.TargetPath = target
	if _, err := pub.node.NodePublishVolume(pub.ctx, pub.req); err != nil {
		if csiclient.MayBeInProgress(err) {
			return volume.NewUncertainError(err)
		}
		_ = removeIfEmpty(filepath.Dir(target))
		return err
	}
	if err := b.p.bindDevice(target, filepath.Join(b.p.blockDevDir(pv), string(uid))); err != nil {
		return err
	}
	return volume.ReplaceSymlink(target, b.Path())
}

// bindDevice bind-mounts the published device file at dst unless it is mounted already.
func (p *csiPlugin) bindDevice(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return err
	}
	if mnt, err := p.host.Mounter().IsLikelyNotMountPoint(dst); err == nil && !mnt {
		return nil
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return err
	}
	_ = f.Close()
	if err := p.host.Mounter().Mount(src, dst, "", []string{"bind"}); err != nil {
		return fmt.Errorf("bind mount of device %s at %s: %w", src, dst, err)
	}
	return nil
}

// blockUnmapper unmaps and unpublishes a pod's block volume: the kubelet's
// util.UnmapBlockVolume followed by csiBlockMapper.UnmapPodDevice.
type blockUnmapper struct {
	p   *csiPlugin
	pv  string
	uid types.UID
}

func (u *blockUnmapper) Path() string {
	return u.p.host.Paths().PodVolumeDevicePath(u.uid, PluginName, u.pv)
}

// TearDown implements volume.Unmounter. Each step tolerates its work being done already,
// so a teardown interrupted by a crash completes on the next try.
func (u *blockUnmapper) TearDown(ctx context.Context) error {
	if err := os.Remove(u.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dev := filepath.Join(u.p.blockDevDir(u.pv), string(u.uid))
	if mnt, err := u.p.host.Mounter().IsLikelyNotMountPoint(dev); err == nil && !mnt {
		if err := detachLoopReferences(dev); err != nil {
			return err
		}
		if err := u.p.host.Mounter().Unmount(dev); err != nil {
			return err
		}
	}
	if err := removeAll(dev); err != nil {
		return err
	}
	target := u.p.blockPublishPath(u.pv, u.uid)
	data, err := readVolData(u.p.blockDataDir(u.pv))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if mnt, merr := u.p.host.Mounter().IsLikelyNotMountPoint(target); merr == nil && !mnt {
			return fmt.Errorf("%s is mounted but has no %s: cannot tell which driver owns it", target, volDataFile)
		}
	case err != nil:
		return err
	default:
		node, _, err := u.p.nodeClient(ctx, data.DriverName)
		if err != nil {
			return err
		}
		if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: data.VolumeHandle, TargetPath: target}); err != nil {
			return err
		}
	}
	if err := removeAll(target); err != nil {
		return err
	}
	return removeIfEmpty(filepath.Dir(target))
}

// loopBackingFiles is where the kernel names each loop device's backing file.
var loopBackingFiles = "/sys/block/loop*/loop/backing_file"

// detachLoopReferences detaches the loop devices backed by a pod's device file. The
// kubelet's own volume manager holds each block volume it maps open that way
// (volumepathhandler.AttachFileDevice), and the file's bind mount cannot be unmounted while
// one is: a volume mapped by the kubelet and torn down by kubevol (after a switch of volume
// managers) needs them gone, as the kubelet's unmap does (DetachFileDevice).
func detachLoopReferences(path string) error {
	files, _ := filepath.Glob(loopBackingFiles)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)") != path {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		loop, err := os.Open(dev)
		if err != nil {
			return fmt.Errorf("the kubelet's reference %s to %s: %w", dev, path, err)
		}
		// A loop device still open elsewhere is only marked to clear on its last close.
		err = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0)
		loop.Close()
		if err != nil && !errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("detach the kubelet's reference %s to %s: %w", dev, path, err)
		}
	}
	return nil
}

// removeIfEmpty removes dir unless other pods' entries are still in it.
func removeIfEmpty(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}

// blockRefs lists the pods that still map a block volume: its bind mounts under dev/.
func (p *csiPlugin) blockRefs(stagingPath string) ([]string, error) {
	dir := p.blockDevDir(filepath.Base(stagingPath))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	refs := make([]string, 0, len(entries))
	for _, e := range entries {
		refs = append(refs, filepath.Join(dir, e.Name()))
	}
	return refs, nil
}
