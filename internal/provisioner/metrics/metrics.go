// Package metrics defines the provisioner's Prometheus metrics with the names the upstream
// provisioner library and client-go's workqueue use, so existing dashboards and alerts work.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Metrics are the controller metrics (subsystem "controller", as upstream).
type Metrics struct {
	ProvisionTotal    *prometheus.CounterVec
	ProvisionFailed   *prometheus.CounterVec
	ProvisionDuration *prometheus.HistogramVec
	DeleteTotal       *prometheus.CounterVec
	DeleteFailed      *prometheus.CounterVec
	DeleteDuration    *prometheus.HistogramVec
	// InFlight is kubevol's: the records in the intent journal.
	InFlight prometheus.GaugeFunc
	// Queue provides the workqueue_* metrics.
	Queue workqueue.MetricsProvider
}

// New creates the metrics and registers them with reg. inFlight reports the journal size.
func New(reg prometheus.Registerer, inFlight func() float64) *Metrics {
	const sub = "controller"
	m := &Metrics{
		ProvisionTotal:    counterVec(sub, "persistentvolumeclaim_provision_total", "Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim.", "class", "source"),
		ProvisionFailed:   counterVec(sub, "persistentvolumeclaim_provision_failed_total", "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim.", "class", "source"),
		ProvisionDuration: histogramVec(sub, "persistentvolumeclaim_provision_duration_seconds", "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim.", prometheus.DefBuckets, "class", "source"),
		DeleteTotal:       counterVec(sub, "persistentvolume_delete_total", "Total number of persistent volumes deleted succesfully. Broken down by storage class name.", "class"),
		DeleteFailed:      counterVec(sub, "persistentvolume_delete_failed_total", "Total number of persistent volume delete failed attempts. Broken down by storage class name.", "class"),
		DeleteDuration:    histogramVec(sub, "persistentvolume_delete_duration_seconds", "Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name.", prometheus.DefBuckets, "class"),
	}
	if inFlight == nil {
		inFlight = func() float64 { return 0 }
	}
	m.InFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kubevol", Subsystem: "provisioner", Name: "volumes_in_flight",
		Help: "CreateVolume calls recorded in the intent journal whose volume is not yet in a PersistentVolume."}, inFlight)
	qp := newQueueProvider()
	m.Queue = qp
	if reg != nil {
		reg.MustRegister(m.ProvisionTotal, m.ProvisionFailed, m.ProvisionDuration, m.DeleteTotal, m.DeleteFailed, m.DeleteDuration, m.InFlight)
		qp.register(reg)
	}
	return m
}

// queueProvider implements workqueue.MetricsProvider with the metric names of
// k8s.io/component-base/metrics/prometheus/workqueue, without pulling in component-base's
// registry.
type queueProvider struct {
	depth               *prometheus.GaugeVec
	addsC, retriesC     *prometheus.CounterVec
	latency, work       *prometheus.HistogramVec
	unfinished, longest *prometheus.GaugeVec
}

func newQueueProvider() *queueProvider {
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	const sub = "workqueue"
	return &queueProvider{
		depth:      gaugeVec(sub, "depth", "Current depth of workqueue", "name"),
		addsC:      counterVec(sub, "adds_total", "Total number of adds handled by workqueue", "name"),
		retriesC:   counterVec(sub, "retries_total", "Total number of retries handled by workqueue", "name"),
		latency:    histogramVec(sub, "queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested.", buckets, "name"),
		work:       histogramVec(sub, "work_duration_seconds", "How long in seconds processing an item from workqueue takes.", buckets, "name"),
		unfinished: gaugeVec(sub, "unfinished_work_seconds", "How many seconds of work has done that is in progress and hasn't been observed by work_duration.", "name"),
		longest:    gaugeVec(sub, "longest_running_processor_seconds", "How many seconds has the longest running processor for workqueue been running.", "name"),
	}
}

// counterVec, gaugeVec and histogramVec build the vectors of both metric families: every
// one has a subsystem, a name and a help text, and no namespace (upstream's names).
func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: subsystem, Name: name, Help: help}, labels)
}

func gaugeVec(subsystem, name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: subsystem, Name: name, Help: help}, labels)
}

func histogramVec(subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}, labels)
}

func (p *queueProvider) register(reg prometheus.Registerer) {
	reg.MustRegister(p.depth, p.addsC, p.retriesC, p.latency, p.work, p.unfinished, p.longest)
}

func (p *queueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}
func (p *queueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.addsC.WithLabelValues(name)
}
func (p *queueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}
func (p *queueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}
func (p *queueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}
func (p *queueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}
func (p *queueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retriesC.WithLabelValues(name)
}
