// Package volumestats is the kubelet's volume stats for CSI volumes as a Prometheus
// collector: on each scrape it asks the driver of every mounted PVC-backed CSI volume for
// NodeGetVolumeStats, once per claim, and reports the kubelet_volume_stats_* gauges with the
// kubelet's names and labels (namespace, persistentvolumeclaim), which alerting rules written
// for kubelets use. Inline volumes have no claim and are not reported, as by the kubelet; a
// driver without the GET_VOLUME_STATS node capability is skipped.
package volumestats

import (
	"context"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/volume"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

// callTimeout bounds one NodeGetVolumeStats during a scrape.
const callTimeout = 5 * time.Second

var (
	statsLabels         = []string{"namespace", "persistentvolumeclaim"}
	statsCapacityBytes  = prometheus.NewDesc("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", statsLabels, nil)
	statsAvailableBytes = prometheus.NewDesc("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume", statsLabels, nil)
	statsUsedBytes      = prometheus.NewDesc("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", statsLabels, nil)
	statsInodes         = prometheus.NewDesc("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", statsLabels, nil)
	statsInodesFree     = prometheus.NewDesc("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", statsLabels, nil)
	statsInodesUsed     = prometheus.NewDesc("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", statsLabels, nil)
)

// States gives the actual state to report; *volumemanager.Manager is one.
type States interface {
	ActualState() volumemanager.ActualState
}

// Collector is a prometheus.Collector of the volumes of one volume manager.
type Collector struct {
	manager States
	drivers csiplugin.Drivers
	paths   volume.Paths
	ctx     func() context.Context
}

// NewCollector returns the collector of the volumes of m (a *volumemanager.Manager), asking
// the drivers (a *csidrivers.Registry) for the stats of the volumes under paths. ctx, if not
// nil, gives the context of each scrape's calls (its logger, its end); nil means
// context.Background.
func NewCollector(m States, drivers csiplugin.Drivers, paths volume.Paths, ctx func() context.Context) *Collector {
	if ctx == nil {
		ctx = context.Background
	}
	return &Collector{manager: m, drivers: drivers, paths: paths, ctx: ctx}
}

// Describe implements prometheus.Collector.
func (s *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{statsCapacityBytes, statsAvailableBytes, statsUsedBytes, statsInodes, statsInodesFree, statsInodesUsed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx := s.ctx()
	asw := s.manager.ActualState()
	seen := map[[2]string]bool{}
	for _, uid := range asw.PodUIDs() {
		for _, mv := range asw.PodVolumes(uid) {
			if mv.PluginName != csiplugin.PluginName || mv.State != volumemanager.VolumeMounted {
				continue
			}
			av, ok := asw.Volume(mv.Name)
			if !ok || av.Spec == nil || av.Spec.PersistentVolume == nil || av.Spec.PersistentVolume.Spec.ClaimRef == nil {
				continue // inline volumes have no claim, as in the kubelet's metrics
			}
			pv := av.Spec.PersistentVolume
			key := [2]string{pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name}
			if seen[key] {
				continue
			}
			// A block volume reports its size only (the driver has no filesystem to read).
			path := csiplugin.TargetPath(s.paths, uid, mv.SpecName, mv.Block)
			if s.collectOne(ctx, ch, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle, path, key[:]) {
				seen[key] = true
			}
		}
	}
}

func (s *Collector) collectOne(ctx context.Context, ch chan<- prometheus.Metric, driver, handle, path string, labels []string) bool {
	logger := klog.FromContext(ctx).WithValues("volumeID", handle, "pvc", labels[0]+"/"+labels[1])
	node, caps, err := s.drivers.Node(ctx, driver)
	if err != nil || !caps[csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS] {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	rsp, err := node.NodeGetVolumeStats(cctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: handle, VolumePath: path})
	if err != nil {
		logger.V(2).Info("NodeGetVolumeStats failed", "err", err)
		return false
	}
	for _, u := range rsp.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			ch <- prometheus.MustNewConstMetric(statsCapacityBytes, prometheus.GaugeValue, float64(u.GetTotal()), labels...)
			ch <- prometheus.MustNewConstMetric(statsAvailableBytes, prometheus.GaugeValue, float64(u.GetAvailable()), labels...)
			ch <- prometheus.MustNewConstMetric(statsUsedBytes, prometheus.GaugeValue, float64(u.GetUsed()), labels...)
		case csipb.VolumeUsage_INODES:
			ch <- prometheus.MustNewConstMetric(statsInodes, prometheus.GaugeValue, float64(u.GetTotal()), labels...)
			ch <- prometheus.MustNewConstMetric(statsInodesFree, prometheus.GaugeValue, float64(u.GetAvailable()), labels...)
			ch <- prometheus.MustNewConstMetric(statsInodesUsed, prometheus.GaugeValue, float64(u.GetUsed()), labels...)
		}
	}
	return true
}
