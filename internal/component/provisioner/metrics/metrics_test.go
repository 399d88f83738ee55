package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// TestNames pins the exported names, label sets and buckets: dashboards and alerts written
// for upstream's provisioner and client-go's workqueue rely on them.
func TestNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, func() float64 { return 3 })
	m.ProvisionTotal.WithLabelValues("sc", "").Inc()
	m.ProvisionFailed.WithLabelValues("sc", "").Inc()
	m.ProvisionDuration.WithLabelValues("sc", "").Observe(1)
	m.DeleteTotal.WithLabelValues("sc").Inc()
	m.DeleteFailed.WithLabelValues("sc").Inc()
	m.DeleteDuration.WithLabelValues("sc").Observe(1)
	q := m.Queue
	q.NewDepthMetric("claims").Inc()
	q.NewAddsMetric("claims").Inc()
	q.NewRetriesMetric("claims").Inc()
	q.NewLatencyMetric("claims").Observe(1)
	q.NewWorkDurationMetric("claims").Observe(1)
	q.NewUnfinishedWorkSecondsMetric("claims").Set(1)
	q.NewLongestRunningProcessorSecondsMetric("claims").Set(1)
	waiting := controller.NewQueue[string]("claims", controller.QueueConfig{Metrics: q}) // kubevol's oldest-waiting gauge
	defer waiting.ShutDown()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	want := map[string]struct {
		typ     dto.MetricType
		labels  []string
		buckets int
	}{
		"controller_persistentvolumeclaim_provision_total":            {dto.MetricType_COUNTER, []string{"class", "source"}, 0},
		"controller_persistentvolumeclaim_provision_failed_total":     {dto.MetricType_COUNTER, []string{"class", "source"}, 0},
		"controller_persistentvolumeclaim_provision_duration_seconds": {dto.MetricType_HISTOGRAM, []string{"class", "source"}, len(prometheus.DefBuckets)},
		"controller_persistentvolume_delete_total":                    {dto.MetricType_COUNTER, []string{"class"}, 0},
		"controller_persistentvolume_delete_failed_total":             {dto.MetricType_COUNTER, []string{"class"}, 0},
		"controller_persistentvolume_delete_duration_seconds":         {dto.MetricType_HISTOGRAM, []string{"class"}, len(prometheus.DefBuckets)},
		"kubevol_provisioner_volumes_in_flight":                       {dto.MetricType_GAUGE, nil, 0},
		"workqueue_depth":                                             {dto.MetricType_GAUGE, []string{"name"}, 0},
		"workqueue_adds_total":                                        {dto.MetricType_COUNTER, []string{"name"}, 0},
		"workqueue_retries_total":                                     {dto.MetricType_COUNTER, []string{"name"}, 0},
		"workqueue_queue_duration_seconds":                            {dto.MetricType_HISTOGRAM, []string{"name"}, 12},
		"workqueue_work_duration_seconds":                             {dto.MetricType_HISTOGRAM, []string{"name"}, 12},
		"workqueue_unfinished_work_seconds":                           {dto.MetricType_GAUGE, []string{"name"}, 0},
		"workqueue_longest_running_processor_seconds":                 {dto.MetricType_GAUGE, []string{"name"}, 0},
		"workqueue_longest_waiting_item_seconds":                      {dto.MetricType_GAUGE, []string{"name"}, 0},
	}
	if len(got) != len(want) {
		t.Errorf("%d metric families, want %d", len(got), len(want))
	}
	for name, w := range want {
		f, ok := got[name]
		if !ok {
			t.Errorf("metric %s missing", name)
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s is a %v, want %v", name, f.GetType(), w.typ)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		metric := f.GetMetric()[0]
		var labels []string
		for _, l := range metric.GetLabel() {
			labels = append(labels, l.GetName())
		}
		if !slices.Equal(labels, w.labels) {
			t.Errorf("%s has labels %v, want %v", name, labels, w.labels)
		}
		if n := len(metric.GetHistogram().GetBucket()); n != w.buckets {
			t.Errorf("%s has %d buckets, want %d", name, n, w.buckets)
		}
	}
	if v := got["kubevol_provisioner_volumes_in_flight"].GetMetric()[0].GetGauge().GetValue(); v != 3 {
		t.Errorf("volumes_in_flight = %v, want 3 (the journal size)", v)
	}
}
