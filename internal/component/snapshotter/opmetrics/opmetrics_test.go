package opmetrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

// Each call records upstream's operation names and labels, the group ones as the snapshot
// ones; a deletion cancels the creates that had not ended.
func TestOperations(t *testing.T) {
	created := time.Now().Add(-3 * time.Second)
	deleted := time.Now().Add(-time.Second)
	for _, tc := range []struct {
		name   string
		record func(m *opmetrics.Metrics)
		want   map[string]int // "op status type driver" -> count
	}{
		{"group created and ready", func(m *opmetrics.Metrics) {
			s := opmetrics.Subject{Ops: opmetrics.Group, Driver: "d", Type: opmetrics.Dynamic}
			m.Created(s, created)
			m.Ready(s, created)
		}, map[string]int{"CreateGroupSnapshot success dynamic d": 1, "CreateGroupSnapshotAndReady success dynamic d": 1}},
		{"ready group deleted", func(m *opmetrics.Metrics) {
			m.Deleted(opmetrics.Subject{Ops: opmetrics.Group, Driver: "d", Type: opmetrics.PreProvisioned}, created, deleted, true, true)
		}, map[string]int{"DeleteGroupSnapshot success pre-provisioned d": 1}},
		{"group deleted before it was taken", func(m *opmetrics.Metrics) {
			m.Deleted(opmetrics.Subject{Ops: opmetrics.Group, Type: opmetrics.Dynamic}, created, deleted, false, false)
		}, map[string]int{
			"DeleteGroupSnapshot success dynamic unknown":        1,
			"CreateGroupSnapshot cancel dynamic unknown":         1,
			"CreateGroupSnapshotAndReady cancel dynamic unknown": 1,
		}},
		{"snapshot deleted before it was ready", func(m *opmetrics.Metrics) {
			s := opmetrics.Subject{Ops: opmetrics.Snapshot, Driver: "d", Type: opmetrics.Dynamic}
			m.Created(s, created)
			m.Deleted(s, created, deleted, true, false)
		}, map[string]int{
			"CreateSnapshot success dynamic d":        1,
			"DeleteSnapshot success dynamic d":        1,
			"CreateSnapshotAndReady cancel dynamic d": 1,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := opmetrics.New(reg)
			tc.record(m)
			snaptest.CheckOperations(t, reg, tc.want)
		})
	}
}

// An operation is timed from the timestamp it is given, not from the call.
func TestTimedFromTimestamp(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := opmetrics.New(reg)
	m.Ready(opmetrics.Subject{Ops: opmetrics.Group, Driver: "d", Type: opmetrics.Dynamic}, time.Now().Add(-time.Minute))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "snapshot_controller_operation_total_seconds" {
			continue
		}
		if sum := f.GetMetric()[0].GetHistogram().GetSampleSum(); sum < 60 {
			t.Errorf("duration %v s, want at least 60", sum)
		}
		return
	}
	t.Fatal("no histogram")
}

// The in-flight gauge is the sum of its sources, each set anew.
func TestInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := opmetrics.New(reg)
	m.SetInFlight("snapshots", 3)
	m.SetInFlight("groups", 2)
	m.SetInFlight("snapshots", 1)
	want := `# HELP snapshot_controller_operations_in_flight Total number of operations in flight
# TYPE snapshot_controller_operations_in_flight gauge
snapshot_controller_operations_in_flight 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "snapshot_controller_operations_in_flight"); err != nil {
		t.Error(err)
	}
}
