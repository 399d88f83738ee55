// Package queuetest reads the workqueue_* metrics of one queue in tests.
package queuetest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is the series family{name=queue} of reg, nil when there is none.
func Metric(t testing.TB, reg prometheus.Gatherer, family, queue string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == queue {
					return m
				}
			}
		}
	}
	return nil
}

// Value is the value of the gauge or counter family{name=queue} of reg, -1 when there is
// none.
func Value(t testing.TB, reg prometheus.Gatherer, family, queue string) float64 {
	t.Helper()
	m := Metric(t, reg, family, queue)
	switch {
	case m == nil:
		return -1
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	default:
		return m.GetGauge().GetValue()
	}
}
