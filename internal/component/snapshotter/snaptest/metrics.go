package snaptest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Operations maps "operation status type driver" to the number of operations
// snapshot_controller_operation_total_seconds holds in reg.
func Operations(t testing.TB, reg prometheus.Gatherer) map[string]int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range families {
		if f.GetName() != "snapshot_controller_operation_total_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			key := strings.Join([]string{l["operation_name"], l["operation_status"], l["snapshot_type"], l["driver_name"]}, " ")
			out[key] = int(s.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// CheckOperations fails the test unless reg holds exactly the operations of want, keyed as
// Operations keys them.
func CheckOperations(t testing.TB, reg prometheus.Gatherer, want map[string]int) {
	t.Helper()
	got := Operations(t, reg)
	if len(got) != len(want) {
		t.Errorf("operations %v, want %v", got, want)
		return
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s recorded %d times, want %d (all: %v)", k, got[k], n, got)
		}
	}
}
