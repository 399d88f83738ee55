package driver

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// metrics are kept in a registry of their own, so that several drivers can run in one test
// process.
type metrics struct {
	registry *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubevol_driver_rpc_total", Help: "CSI calls served, by method and gRPC code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubevol_driver_rpc_duration_seconds",
			Help:    "Time to serve a CSI call, by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubevol_driver_rpc_inflight", Help: "CSI calls being served.",
		}),
	}
	m.registry.MustRegister(m.calls, m.duration, m.inflight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(method string, code codes.Code, d time.Duration) {
	m.calls.WithLabelValues(method, code.String()).Inc()
	m.duration.WithLabelValues(method).Observe(d.Seconds())
}

// gauge registers a value computed at scrape time.
func (m *metrics) gauge(name, help string, labels prometheus.Labels, f func() float64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// counter registers a monotonic count read at scrape time.
func (m *metrics) counter(name, help string, labels prometheus.Labels, f func() float64) {
	m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// commits exports the group commits of one state document: changes/writes is how many
// changes one write and fsync covered on average.
func (m *metrics) commits(document string, c *state.Committer) {
	labels := prometheus.Labels{"document": document}
	m.counter("kubevol_driver_state_writes_total", "Writes of a state document, each with two fsyncs.", labels,
		func() float64 { w, _ := c.Writes(); return float64(w) })
	m.counter("kubevol_driver_state_changes_total", "Changes persisted by those writes; several calls share a write.", labels,
		func() float64 { _, n := c.Writes(); return float64(n) })
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
