package volumemanager

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and labels are upstream's, so existing dashboards work.
type metrics struct {
	opDuration      *prometheus.HistogramVec
	overallDuration *prometheus.HistogramVec
	reconstructed   prometheus.Counter
	reconstructErrs prometheus.Counter
}

var operationBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}

func newMetrics(reg prometheus.Registerer, dsw *desiredState, asw *actualState) *metrics {
	m := &metrics{
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "storage_operation_duration_seconds",
			Help:    "Storage operation duration",
			Buckets: operationBuckets,
		}, []string{"volume_plugin", "operation_name", "status", "migrated"}),
		overallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "volume_operation_total_seconds",
			Help:    "Storage operation end to end duration in seconds",
			Buckets: operationBuckets,
		}, []string{"plugin_name", "operation_name"}),
		reconstructed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reconstruct_volume_operations_total",
			Help: "The number of volumes that were attempted to be reconstructed from the operating system during kubelet startup.",
		}),
		reconstructErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reconstruct_volume_operations_errors_total",
			Help: "The number of volumes that failed reconstruction from the operating system during kubelet startup.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.opDuration, m.overallDuration, m.reconstructed, m.reconstructErrs, &totalVolumes{dsw: dsw, asw: asw})
	}
	return m
}

func (m *metrics) observeOperation(plugin, op string, migrated bool, err error, d time.Duration) {
	if m == nil {
		return
	}
	status := "success"
	if err != nil {
		status = "fail-unknown"
	}
	m.opDuration.WithLabelValues(plugin, op, status, strconv.FormatBool(migrated)).Observe(d.Seconds())
}

func (m *metrics) observeOverallMount(plugin string, d time.Duration) {
	if m != nil {
		m.overallDuration.WithLabelValues(plugin, "overall_volume_mount").Observe(d.Seconds())
	}
}

// totalVolumes is volume_manager_total_volumes{plugin_name,state}, computed at scrape time
// as upstream's collector does; the actual state counts only mounted volumes.
type totalVolumes struct {
	dsw *desiredState
	asw *actualState
}

var totalVolumesDesc = prometheus.NewDesc("volume_manager_total_volumes",
	"Number of volumes in Volume Manager", []string{"plugin_name", "state"}, nil)

func (c *totalVolumes) Describe(ch chan<- *prometheus.Desc) { ch <- totalVolumesDesc }

func (c *totalVolumes) Collect(ch chan<- prometheus.Metric) {
	for state, counts := range map[string]map[string]int{
		"desired_state_of_world": c.dsw.Counts(),
		"actual_state_of_world":  c.asw.Counts(),
	} {
		for plugin, n := range counts {
			ch <- prometheus.MustNewConstMetric(totalVolumesDesc, prometheus.GaugeValue, float64(n), plugin, state)
		}
	}
}
