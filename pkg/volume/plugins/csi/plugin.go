// Package csi is the CSI volume plugin, the kubelet's kubernetes.io/csi: it sets up
// PV-backed CSI volumes (wait for the VolumeAttachment when the driver needs attaching,
// NodeStage to a per-node global mount, NodePublish per pod) and inline ephemeral CSI
// volumes (NodePublish only), with the kubelet's on-disk layout and vol_data.json files, so
// that reconstruction after a restart and drivers written for the kubelet both work.
package csi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/kubevol/kubevol/pkg/volume"
)

// PluginName is the kubelet's name of the CSI plugin.
const PluginName = "kubernetes.io/csi"

// Drivers gives the plugin the node service of a registered CSI driver, one connection per
// driver shared by every call, and the node capabilities the driver announced.
// pkg/csidrivers.Registry is a node's, fed by the plugin registration directory.
type Drivers interface {
	Node(ctx context.Context, driver string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error)
}

// Config configures the plugin. Drivers is required.
type Config struct {
	Drivers Drivers
	// CSIDrivers, if set, is a synced cache of CSIDriver objects; without it they are read
	// from the API server at each use. The node agent sets it, as the kubelet uses an
	// informer, because the populator asks for every pod.
	CSIDrivers storagelisters.CSIDriverLister
	// RepublishPeriod is how often a volume of a driver with CSIDriver.requiresRepublish is
	// published again; default one minute, the kubelet's --sync-frequency, whose pod syncs
	// republish upstream.
	RepublishPeriod time.Duration
}

// csiPlugin is the CSI volume plugin. It implements volume.AttachablePlugin,
// volume.BlockPlugin, volume.ExpandablePlugin and the SELinux extensions.
type csiPlugin struct {
	drivers    Drivers
	csiDrivers storagelisters.CSIDriverLister
	republish  time.Duration
	host       volume.Host
}

var (
	_ volume.AttachablePlugin = (*csiPlugin)(nil)
	_ volume.BlockPlugin      = (*csiPlugin)(nil)
	_ volume.ExpandablePlugin = (*csiPlugin)(nil)

	_ volume.SELinuxContextMountPlugin = (*csiPlugin)(nil)
	_ volume.SELinuxContextReader      = (*csiPlugin)(nil)
)

// New returns the CSI plugin (kubernetes.io/csi). It implements volume.AttachablePlugin
// (and so volume.DeviceMountablePlugin), volume.BlockPlugin, volume.ExpandablePlugin,
// volume.SELinuxContextMountPlugin and volume.SELinuxContextReader.
func New(cfg Config) volume.Plugin {
	if cfg.RepublishPeriod <= 0 {
		cfg.RepublishPeriod = time.Minute
	}
	return &csiPlugin{drivers: cfg.Drivers, csiDrivers: cfg.CSIDrivers, republish: cfg.RepublishPeriod}
}

// Init implements volume.Plugin.
func (p *csiPlugin) Init(host volume.Host) error {
	if p.drivers == nil {
		return errors.New("csi: no driver registry")
	}
	p.host = host
	return nil
}

// Name implements volume.Plugin.
func (p *csiPlugin) Name() string { return PluginName }

// CanSupport implements volume.Plugin.
func (p *csiPlugin) CanSupport(spec *volume.Spec) bool {
	return (spec.PersistentVolume != nil && spec.PersistentVolume.Spec.CSI != nil) ||
		(spec.Volume != nil && spec.Volume.CSI != nil)
}

// RequiresRemount implements volume.Plugin: CSIDriver.requiresRepublish, so that a driver
// gets fresh service account tokens and pod info (upstream csiPlugin.RequiresRemount).
func (p *csiPlugin) RequiresRemount(spec *volume.Spec) bool {
	src, err := sourceOf(spec)
	if err != nil {
		return false
	}
	drv, err := p.csiDriver(context.Background(), src.driver)
	return err == nil && requiresRepublish(drv)
}

func requiresRepublish(drv *storagev1.CSIDriver) bool {
	return drv != nil && drv.Spec.RequiresRepublish != nil && *drv.Spec.RequiresRepublish
}

// VolumeName implements volume.DeviceMountablePlugin: "<driver>^<handle>", as upstream.
func (p *csiPlugin) VolumeName(spec *volume.Spec) (string, error) {
	src, err := sourceOf(spec)
	if err != nil {
		return "", err
	}
	if src.ephemeral {
		return "", fmt.Errorf("inline volume %q has no node-wide name", spec.Name())
	}
	return src.driver + "^" + src.handle, nil
}

// CanDeviceMount implements volume.DeviceMountablePlugin: PV-backed volumes are staged,
// inline ephemeral ones are published only, as upstream.
func (p *csiPlugin) CanDeviceMount(spec *volume.Spec) (bool, error) {
	return spec.PersistentVolume != nil, nil
}

// CanAttach implements volume.AttachablePlugin: a PV-backed volume is attached unless its
// CSIDriver says attachRequired: false; no CSIDriver object means attach (upstream
// default).
func (p *csiPlugin) CanAttach(spec *volume.Spec) (bool, error) {
	if spec.PersistentVolume == nil {
		return false, nil
	}
	drv, err := p.csiDriver(context.Background(), spec.PersistentVolume.Spec.CSI.Driver)
	if err != nil {
		return false, err
	}
	return drv == nil || drv.Spec.AttachRequired == nil || *drv.Spec.AttachRequired, nil
}

// NewAttacher implements volume.AttachablePlugin.
func (p *csiPlugin) NewAttacher() (volume.Attacher, error) { return &deviceMounter{p: p}, nil }

// NewDeviceMounter implements volume.DeviceMountablePlugin.
func (p *csiPlugin) NewDeviceMounter() (volume.DeviceMounter, error) {
	return &deviceMounter{p: p}, nil
}

// NewDeviceUnmounter implements volume.DeviceMountablePlugin.
func (p *csiPlugin) NewDeviceUnmounter() (volume.DeviceUnmounter, error) {
	return &deviceMounter{p: p}, nil
}

// DeviceMountRefs implements volume.DeviceMountablePlugin.
func (p *csiPlugin) DeviceMountRefs(deviceMountPath string) ([]string, error) {
	if p.isBlockStaging(deviceMountPath) {
		return p.blockRefs(deviceMountPath)
	}
	if _, err := os.Stat(deviceMountPath); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	refs, err := p.host.Mounter().GetMountRefs(deviceMountPath)
	if err != nil {
		return nil, err
	}
	// Several node agents on one machine (kubevol up --nodes) share its mount table: a
	// volume reachable from every node (network storage) bind-mounted by another agent is
	// that node's, not a reference of this one's, as it would be on another machine.
	root := p.host.Paths().Root
	return slices.DeleteFunc(refs, func(ref string) bool { return otherAgentsMount(root, ref) }), nil
}

// otherAgentsMount reports whether a mount point is, in the kubelet's layout, a staging or
// pod mount of a CSI volume outside this agent's root directory.
func otherAgentsMount(root, ref string) bool {
	if root == "" || strings.HasPrefix(ref, filepath.Clean(root)+string(filepath.Separator)) {
		return false
	}
	parts := strings.Split(filepath.Clean(ref), string(filepath.Separator))
	n := len(parts)
	staging := n >= 6 && parts[n-1] == "globalmount" && parts[n-6] == "plugins" && parts[n-5] == "kubernetes.io" && parts[n-4] == "csi"
	pod := n >= 6 && parts[n-1] == "mount" && parts[n-3] == volume.EscapePluginName(PluginName) && parts[n-4] == "volumes" && parts[n-6] == "pods"
	return staging || pod
}

// NewMounter implements volume.Plugin.
func (p *csiPlugin) NewMounter(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	src, err := sourceOf(spec)
	if err != nil {
		return nil, err
	}
	if src.ephemeral {
		// The handle of an inline volume is derived from the pod and the volume, as upstream.
		src.handle = fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(pod.UID)+spec.Name())))
	}
	return &mounter{p: p, spec: spec, pod: pod, src: src, dir: p.volumeDir(pod.UID, spec.Name())}, nil
}

// NewUnmounter implements volume.Plugin.
func (p *csiPlugin) NewUnmounter(volumeName string, podUID types.UID) (volume.Unmounter, error) {
	return &unmounter{p: p, dir: p.volumeDir(podUID, volumeName)}, nil
}

// ConstructVolumeSpec implements volume.Plugin from the vol_data.json beside the mount.
func (p *csiPlugin) ConstructVolumeSpec(volumeName, volumePath string) (*volume.Spec, error) {
	data, err := readVolData(volumePath)
	if err != nil {
		return nil, err
	}
	if data.LifecycleMode == string(storagev1.VolumeLifecycleEphemeral) {
		return volume.SpecFromVolume(&v1.Volume{Name: volumeName, VolumeSource: v1.VolumeSource{
			CSI: &v1.CSIVolumeSource{Driver: data.DriverName},
		}}), nil
	}
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: volumeName},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			CSI: &v1.CSIPersistentVolumeSource{Driver: data.DriverName, VolumeHandle: data.VolumeHandle},
		}},
	}, false), nil
}

// MountedSELinuxContext implements volume.SELinuxContextReader from the vol_data.json beside
// the mount, as the kubelet reconstructs it.
func (p *csiPlugin) MountedSELinuxContext(dir string) (string, error) {
	data, err := readVolData(dir)
	if err != nil {
		return "", err
	}
	return data.SELinuxMountContext, nil
}

// TargetPath is NodePublish's target_path for a pod's volume, which NodeExpandVolume and
// NodeGetVolumeStats take as volume_path: the directory
// pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount, or for a block volume the device file
// plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid> (the kubelet's paths).
func TargetPath(paths volume.Paths, uid types.UID, specName string, block bool) string {
	if block {
		return filepath.Join(paths.PluginDir(PluginName), "volumeDevices", "publish", specName, string(uid))
	}
	return filepath.Join(paths.PodVolumeDir(uid, PluginName, specName), "mount")
}

// volumeDir is pods/<uid>/volumes/kubernetes.io~csi/<volume>: it holds vol_data.json and
// the publish target "mount".
func (p *csiPlugin) volumeDir(uid types.UID, name string) string {
	return p.host.Paths().PodVolumeDir(uid, PluginName, name)
}

// stagingPath is NodeStage's staging_target_path: for a filesystem volume
// plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount, the kubelet's path since
// 1.25 (upstream makeDeviceMountPath); for a block volume the kubelet still keys it by PV
// name, plugins/kubernetes.io/csi/volumeDevices/staging/<pv>.
func (p *csiPlugin) stagingPath(spec *volume.Spec, src source) string {
	if src.block {
		return filepath.Join(p.blockRoot(), "staging", spec.Name())
	}
	return filepath.Join(p.host.Paths().PluginDir(PluginName), src.driver, fmt.Sprintf("%x", sha256.Sum256([]byte(src.handle))), "globalmount")
}

// stagingMetaDir is where the vol_data.json of a staged volume lives: beside globalmount for
// a filesystem volume, in volumeDevices/<pv>/data for a block volume, as upstream.
func (p *csiPlugin) stagingMetaDir(stagingPath string) string {
	if p.isBlockStaging(stagingPath) {
		return p.blockDataDir(filepath.Base(stagingPath))
	}
	return filepath.Dir(stagingPath)
}

// SupportsSELinuxContextMount implements volume.SELinuxContextMountPlugin: the CSIDriver
// says seLinuxMount: true (without a CSIDriver, no).
func (p *csiPlugin) SupportsSELinuxContextMount(spec *volume.Spec) (bool, error) {
	src, err := sourceOf(spec)
	if err != nil {
		return false, err
	}
	d, err := p.csiDriver(context.Background(), src.driver)
	if err != nil || d == nil {
		return false, err
	}
	return d.Spec.SELinuxMount != nil && *d.Spec.SELinuxMount, nil
}

// csiDriver returns the CSIDriver object, or nil when there is none.
func (p *csiPlugin) csiDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	var d *storagev1.CSIDriver
	var err error
	switch c := p.host.KubeClient(); {
	case p.csiDrivers != nil:
		d, err = p.csiDrivers.Get(name)
	case c != nil:
		d, err = c.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	default:
		return nil, nil
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, volume.NewTransientError(fmt.Errorf("get CSIDriver %s: %w", name, err))
	}
	return d, nil
}

// nodeClient returns the driver's node client; an unregistered driver is transient: it
// may register in a moment.
func (p *csiPlugin) nodeClient(ctx context.Context, driver string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	c, caps, err := p.drivers.Node(ctx, driver)
	if err != nil {
		return nil, nil, volume.NewTransientError(err)
	}
	return c, caps, nil
}

// source is what a spec says about its CSI volume.
type source struct {
	driver, handle, fsType string
	readOnly, ephemeral    bool
	block                  bool
	attributes             map[string]string
	stageSecret            *v1.SecretReference
	publishSecret          *v1.SecretReference
	expandSecret           *v1.SecretReference
	mountOptions           []string
	accessModes            []v1.PersistentVolumeAccessMode
}

func sourceOf(spec *volume.Spec) (source, error) {
	switch {
	case spec.PersistentVolume != nil && spec.PersistentVolume.Spec.CSI != nil:
		pv := spec.PersistentVolume
		c := pv.Spec.CSI
		return source{
			driver: c.Driver, handle: c.VolumeHandle, fsType: c.FSType,
			readOnly: spec.ReadOnly || c.ReadOnly, attributes: c.VolumeAttributes,
			stageSecret: c.NodeStageSecretRef, publishSecret: c.NodePublishSecretRef, expandSecret: c.NodeExpandSecretRef,
			mountOptions: pv.Spec.MountOptions, accessModes: pv.Spec.AccessModes, block: spec.Block(),
		}, nil
	case spec.Volume != nil && spec.Volume.CSI != nil:
		c := spec.Volume.CSI
		s := source{driver: c.Driver, ephemeral: true, attributes: c.VolumeAttributes, readOnly: spec.ReadOnly}
		if c.FSType != nil {
			s.fsType = *c.FSType
		}
		if c.ReadOnly != nil && *c.ReadOnly {
			s.readOnly = true
		}
		if c.NodePublishSecretRef != nil {
			s.publishSecret = &v1.SecretReference{Name: c.NodePublishSecretRef.Name}
		}
		return s, nil
	}
	return source{}, fmt.Errorf("volume %q is not a CSI volume", spec.Name())
}

// capability is the CSI volume capability of the volume, Block for a block volume, Mount
// otherwise, whose mount flags end with context="<label>" when the volume is mounted with an
// SELinux context (quoted, as the kubelet does, since a label may hold commas). The access
// mode follows upstream's mapping: a driver with the node capability SINGLE_NODE_MULTI_WRITER
// gets SINGLE_NODE_MULTI_WRITER for RWO (so that two pods of one node may share the volume)
// and SINGLE_NODE_SINGLE_WRITER for RWOP; any other driver gets SINGLE_NODE_WRITER for both.
func (s source) capability(mountGroup, seLinuxLabel string, caps map[csipb.NodeServiceCapability_RPC_Type]bool) *csipb.VolumeCapability {
	multiWriter := caps[csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER]
	mode := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	switch {
	case slices.Contains(s.accessModes, v1.ReadWriteOncePod):
		if multiWriter {
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	case slices.Contains(s.accessModes, v1.ReadWriteMany):
		mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case slices.Contains(s.accessModes, v1.ReadOnlyMany) && !slices.Contains(s.accessModes, v1.ReadWriteOnce):
		mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case multiWriter:
		mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	}
	vc := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode}}
	if s.block {
		vc.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return vc
	}
	flags := s.mountOptions
	if seLinuxLabel != "" {
		flags = append(slices.Clip(flags), fmt.Sprintf("context=%q", seLinuxLabel))
	}
	vc.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{
		FsType: s.fsType, MountFlags: flags, VolumeMountGroup: mountGroup,
	}}
	return vc
}
