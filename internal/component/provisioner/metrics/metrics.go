// Package metrics defines the provisioner's Prometheus metrics with the names the upstream
// provisioner library and client-go's workqueue (through internal/runtime/controller) use, so
// existing dashboards and alerts work.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubevol/kubevol/internal/runtime/controller"
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
	Queue *controller.QueueMetrics
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
	m.Queue = controller.NewQueueMetrics(reg)
	if reg != nil {
		reg.MustRegister(m.ProvisionTotal, m.ProvisionFailed, m.ProvisionDuration, m.DeleteTotal, m.DeleteFailed, m.DeleteDuration, m.InFlight)
	}
	return m
}

// counterVec and histogramVec build the vectors: every one has a subsystem, a name and a
// help text, and no namespace (upstream's names).
func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: subsystem, Name: name, Help: help}, labels)
}

func histogramVec(subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}, labels)
}
