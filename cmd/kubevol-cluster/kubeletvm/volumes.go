package kubeletvm

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kvolume "k8s.io/kubernetes/pkg/volume"

	"github.com/kubevol/kubevol/pkg/volume"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volume/plugins/emptydir"
	"github.com/kubevol/kubevol/pkg/volume/plugins/hostpath"
	"github.com/kubevol/kubevol/pkg/volume/plugins/image"
	"github.com/kubevol/kubevol/pkg/volume/plugins/local"
)

// errSetUpElsewhere: the kubelet never sets a volume up through what
// GetMountedVolumesForPod returns; kubevol's volume manager did.
var errSetUpElsewhere = errors.New("set up by kubevol's volume manager")

// mounted is a pod volume that kubevol's volume manager set up, as the kubelet's container
// code reads it: its path, attributes and metrics.
type mounted struct {
	path  string
	attrs kvolume.Attributes
	kvolume.MetricsProvider
}

var _ kvolume.Mounter = (*mounted)(nil)

func (m *mounted) GetPath() string                           { return m.path }
func (m *mounted) GetAttributes() kvolume.Attributes         { return m.attrs }
func (m *mounted) SetUp(kvolume.MounterArgs) error           { return errSetUpElsewhere }
func (m *mounted) SetUpAt(string, kvolume.MounterArgs) error { return errSetUpElsewhere }

// mapped is a pod's block volume: the kubelet hands the container the device that link
// (pods/<uid>/volumeDevices/<plugin>/<volume>) points to.
type mapped struct {
	link string
	kvolume.MetricsProvider
}

var _ kvolume.BlockVolumeMapper = (*mapped)(nil)

func (m *mapped) GetGlobalMapPath(*kvolume.Spec) (string, error) { return "", errSetUpElsewhere }
func (m *mapped) GetPodDeviceMapPath() (string, string) {
	return filepath.Dir(m.link), filepath.Base(m.link)
}
func (m *mapped) SupportsMetrics() bool { return true }

// metricsFor chooses how the kubelet's /stats/summary and emptyDir sizeLimit eviction
// measure a volume, as the kubelet's plugins do: du for the volumes on the node's disk
// (emptyDir, configMap, secret, downwardAPI, projected), statfs for local volumes, the
// driver's NodeGetVolumeStats for CSI volumes (at the publish target, a block volume's
// device file included), nothing for hostPath and image volumes.
func metricsFor(plugin string, spec *volume.Spec, path string, drivers *drivers) kvolume.MetricsProvider {
	switch plugin {
	case hostpath.PluginName, image.PluginName:
		return &kvolume.MetricsNil{}
	case local.PluginName:
		return kvolume.NewMetricsStatFS(path)
	case csiplugin.PluginName:
		var src *v1.CSIPersistentVolumeSource
		if spec.PersistentVolume != nil {
			src = spec.PersistentVolume.Spec.CSI
		}
		if src == nil {
			// Inline CSI volumes have no handle of their own to ask about.
			return &kvolume.MetricsNil{}
		}
		return &csiMetrics{drivers: drivers, driver: src.Driver, handle: src.VolumeHandle, path: path}
	case emptydir.PluginName:
		return kvolume.NewCachedMetrics(kvolume.NewMetricsDu(path))
	}
	return kvolume.NewMetricsDu(path)
}

// csiMetrics asks the driver for a CSI volume's usage.
type csiMetrics struct {
	drivers        *drivers
	driver, handle string
	path           string
}

// statsTimeout bounds one NodeGetVolumeStats, as the kubelet's CSI metrics do.
const statsTimeout = 2 * time.Minute

func (d *csiMetrics) GetMetrics() (*kvolume.Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	node, caps, err := d.drivers.Node(ctx, d.driver)
	if err != nil {
		return nil, err
	}
	if !caps[csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS] {
		return nil, kvolume.NewNotSupportedErrorWithDriverName(d.driver)
	}
	rsp, err := node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: d.handle, VolumePath: d.path})
	if err != nil {
		return nil, err
	}
	m := &kvolume.Metrics{Time: metav1.Now()}
	for _, u := range rsp.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			m.Capacity = resource.NewQuantity(u.GetTotal(), resource.BinarySI)
			m.Available = resource.NewQuantity(u.GetAvailable(), resource.BinarySI)
			m.Used = resource.NewQuantity(u.GetUsed(), resource.BinarySI)
		case csipb.VolumeUsage_INODES:
			m.Inodes = resource.NewQuantity(u.GetTotal(), resource.BinarySI)
			m.InodesFree = resource.NewQuantity(u.GetAvailable(), resource.BinarySI)
			m.InodesUsed = resource.NewQuantity(u.GetUsed(), resource.BinarySI)
		}
	}
	return m, nil
}
