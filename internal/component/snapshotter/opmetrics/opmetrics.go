// Package opmetrics is upstream snapshot-controller's operation metrics, shared by both halves
// of kubevol's snapshot-controller role (snapshots and group snapshots): one
// snapshot_controller_operation_total_seconds histogram and one
// snapshot_controller_operations_in_flight gauge in the process, as upstream's single binary
// has.
//
// Upstream keeps each operation's start in memory from the moment its controller first sees
// the object, so a restart loses the operations in flight. kubevol times every operation from
// the object's own creation or deletion timestamp instead, and records it on the transition
// it ends with (the status gets its creation time, turns ready, the last finalizer goes), so
// a restart loses nothing and records nothing twice.
package opmetrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Ops are the operation_name values of one kind of object.
type Ops struct {
	// Create ends when the status first has a creation time.
	Create string
	// CreateAndReady ends when the status first is ready to use.
	CreateAndReady string
	// Delete ends when the controller removes its last finalizer.
	Delete string
}

// The operation names upstream records.
var (
	Snapshot = Ops{Create: "CreateSnapshot", CreateAndReady: "CreateSnapshotAndReady", Delete: "DeleteSnapshot"}
	Group    = Ops{Create: "CreateGroupSnapshot", CreateAndReady: "CreateGroupSnapshotAndReady", Delete: "DeleteGroupSnapshot"}
)

// The snapshot_type and operation_status values upstream records.
const (
	Dynamic        = "dynamic"
	PreProvisioned = "pre-provisioned"
	success        = "success"
	// cancel is a create that had not ended when its object's deletion did.
	cancel = "cancel"
	// unknownDriver is the driver_name of an operation whose driver cannot be told (a
	// snapshot deleted before any content or class named one), as upstream labels it.
	unknownDriver = "unknown"
)

// Subject is the object an operation is about.
type Subject struct {
	Ops Ops
	// Driver is the CSI driver; empty for unknown.
	Driver string
	// Type is Dynamic or PreProvisioned.
	Type string
}

// Metrics are the operation metrics of one process.
type Metrics struct {
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge

	mu sync.Mutex
	// counts are the objects in flight of each source (snapshots, groups): the gauge is
	// their sum, as upstream's one cache of operations counts both kinds.
	counts map[string]int
}

// New returns the metrics, registered with reg unless reg is nil.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "snapshot_controller", Name: "operation_total_seconds",
			Help:    "Total number of seconds spent by the controller on an operation from end to end",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600},
		}, []string{"driver_name", "operation_name", "snapshot_type", "operation_status"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "snapshot_controller", Name: "operations_in_flight",
			Help: "Total number of operations in flight",
		}),
		counts: map[string]int{},
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.inFlight)
	}
	return m
}

func (m *Metrics) observe(s Subject, op, status string, start time.Time) {
	driver := s.Driver
	if driver == "" {
		driver = unknownDriver
	}
	m.duration.WithLabelValues(driver, op, s.Type, status).Observe(time.Since(start).Seconds())
}

// Created records the end of s's Create operation, started at created (the object's creation
// timestamp).
func (m *Metrics) Created(s Subject, created time.Time) { m.observe(s, s.Ops.Create, success, created) }

// Ready records the end of s's CreateAndReady operation, started at created.
func (m *Metrics) Ready(s Subject, created time.Time) {
	m.observe(s, s.Ops.CreateAndReady, success, created)
}

// Deleted records the end of s's Delete operation, started at deleted (the deletion
// timestamp), and, as upstream, a cancel of each create operation that had not ended: Create
// when the object never had a creation time, CreateAndReady when it was never ready. A
// cancelled create is timed from created.
func (m *Metrics) Deleted(s Subject, created, deleted time.Time, hadCreationTime, wasReady bool) {
	m.observe(s, s.Ops.Delete, success, deleted)
	if !hadCreationTime {
		m.observe(s, s.Ops.Create, cancel, created)
	}
	if !wasReady {
		m.observe(s, s.Ops.CreateAndReady, cancel, created)
	}
}

// SetInFlight sets source's number of objects in flight (not yet ready, or being deleted).
func (m *Metrics) SetInFlight(source string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[source] = n
	total := 0
	for _, c := range m.counts {
		total += c
	}
	m.inFlight.Set(float64(total))
}
