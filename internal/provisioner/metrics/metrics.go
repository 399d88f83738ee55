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
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "controller", Name: name, Help: help}, labels)
	}
	hv := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "controller", Name: name, Help: help, Buckets: prometheus.DefBuckets}, labels)
	}
	m := &Metrics{
		ProvisionTotal:    cv("persistentvolumeclaim_provision_total", "Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim.", "class", "source"),
		ProvisionFailed:   cv("persistentvolumeclaim_provision_failed_total", "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim.", "class", "source"),
		ProvisionDuration: hv("persistentvolumeclaim_provision_duration_seconds", "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim.", "class", "source"),
		DeleteTotal:       cv("persistentvolume_delete_total", "Total number of persistent volumes deleted succesfully. Broken down by storage class name.", "class"),
		DeleteFailed:      cv("persistentvolume_delete_failed_total", "Total number of persistent volume delete failed attempts. Broken down by storage class name.", "class"),
		DeleteDuration:    hv("persistentvolume_delete_duration_seconds", "Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name.", "class"),
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
	return &queueProvider{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth", Help: "Current depth of workqueue"}, []string{"name"}),
		addsC:      prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total", Help: "Total number of adds handled by workqueue"}, []string{"name"}),
		retriesC:   prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total", Help: "Total number of retries handled by workqueue"}, []string{"name"}),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "How long in seconds an item stays in workqueue before being requested.", Buckets: buckets}, []string{"name"}),
		work:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds", Help: "How long in seconds processing an item from workqueue takes.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds", Help: "How many seconds of work has done that is in progress and hasn't been observed by work_duration."}, []string{"name"}),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds", Help: "How many seconds has the longest running processor for workqueue been running."}, []string{"name"}),
	}
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
