package controller

import (
	"context"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubevol/kubevol/internal/snapshotter"
)

// Operation names and snapshot types of snapshot_controller_operation_total_seconds.
const (
	opCreate         = "CreateSnapshot"
	opCreateAndReady = "CreateSnapshotAndReady"
	opDelete         = "DeleteSnapshot"
	typeDynamic      = "dynamic"
	typePre          = "pre-provisioned"
)

// metrics are upstream's snapshot-controller metrics. Operations are timed from the
// VolumeSnapshot's creation (or deletion) timestamp, so a restart does not lose them.
type metrics struct {
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "snapshot_controller", Name: "operation_total_seconds",
			Help:    "Total number of seconds spent by the controller on an operation from end to end",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600},
		}, []string{"driver_name", "operation_name", "snapshot_type", "operation_status"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "snapshot_controller", Name: "operations_in_flight",
			Help: "Total number of operations in flight",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.inFlight)
	}
	return m
}

func snapshotType(vs *snapv1.VolumeSnapshot) string {
	if vs.Spec.Source.VolumeSnapshotContentName != nil {
		return typePre
	}
	return typeDynamic
}

// observe records an operation of vs that started at start.
func (m *metrics) observe(vs *snapv1.VolumeSnapshot, driver, op, status string, start time.Time) {
	m.duration.WithLabelValues(driver, op, snapshotType(vs), status).Observe(time.Since(start).Seconds())
}

// updateInFlight recomputes the in-flight gauge (every 30 s, as upstream): snapshots not
// yet ready, and snapshots being deleted.
func (m *metrics) updateInFlight(lister snaplisters.VolumeSnapshotLister) func(context.Context) {
	return func(context.Context) {
		all, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		n := 0
		for _, vs := range all {
			if vs.DeletionTimestamp != nil || vs.Status == nil || !snapshotter.IsTrue(vs.Status.ReadyToUse) {
				n++
			}
		}
		m.inFlight.Set(float64(n))
	}
}
