package kubeletvm

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// bridged are the families of kubevol's volume manager that the kubelet's own volume
// manager registers when it runs, and nothing else in the kubelet does: the kubelet's
// /metrics gets them from kubevol's, once. The rest stays unregistered: the kubelet
// exports kubelet_volume_stats_* itself, and a family registered twice would break every
// scrape.
var bridged = map[string]bool{
	"volume_manager_total_volumes":               true,
	"reconstruct_volume_operations_total":        true,
	"reconstruct_volume_operations_errors_total": true,
}

// bridge is an unchecked collector (its families come and go with the state) that copies
// the bridged families out of kubevol's manager's own registry.
type bridge struct{ from prometheus.Gatherer }

func (bridge) Describe(chan<- *prometheus.Desc) {}

func (b bridge) Collect(ch chan<- prometheus.Metric) {
	families, err := b.from.Gather()
	if err != nil {
		return
	}
	for _, f := range families {
		if !bridged[f.GetName()] {
			continue
		}
		for _, m := range f.GetMetric() {
			names := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			sort.Strings(names)
			ch <- copied{desc: prometheus.NewDesc(f.GetName(), f.GetHelp(), names, nil), m: m}
		}
	}
}

// copied is one gathered metric, written again as it was.
type copied struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (c copied) Desc() *prometheus.Desc { return c.desc }

func (c copied) Write(out *dto.Metric) error {
	out.Label, out.Gauge, out.Counter, out.Untyped = c.m.Label, c.m.Gauge, c.m.Counter, c.m.Untyped
	out.Histogram, out.Summary, out.TimestampMs = c.m.Histogram, c.m.Summary, c.m.TimestampMs
	return nil
}
