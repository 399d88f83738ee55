package controller

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Queue is a typed, rate-limited work queue with a name, under which its workqueue_*
// metrics are exported.
type Queue[K comparable] struct {
	workqueue.TypedRateLimitingInterface[K]
	name    string
	waiting *fifo[K]
	// metrics exports the age of the oldest waiting key while the queue runs; nil when the
	// queue has no QueueMetrics.
	metrics *QueueMetrics
	// exclusive, when set, is shared with the other queues of the same keys (Exclusive).
	exclusive *exclusive[K]
}

// QueueConfig configures a Queue.
type QueueConfig struct {
	// RetryIntervalStart and RetryIntervalMax bound a failed key's exponential backoff
	// (upstream --retry-interval-start and --retry-interval-max). Zero means 1s and 5m.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Metrics receives the queue's workqueue_* metrics; nil exports none.
	Metrics workqueue.MetricsProvider
}

// NewQueue returns a queue whose keys back off exponentially, each on its own, as the
// kubernetes-csi sidecars' queues do.
func NewQueue[K comparable](name string, cfg QueueConfig) *Queue[K] {
	start, limit := cfg.RetryIntervalStart, cfg.RetryIntervalMax
	if start <= 0 {
		start = time.Second
	}
	if limit < start {
		limit = max(start, 5*time.Minute)
	}
	// client-go's queue on our own FIFO, which is its default order plus the time each key
	// began to wait: the same queue, with workqueue_longest_waiting_item_seconds beside
	// client-go's metrics.
	waiting := newFIFO[K]()
	base := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[K]{Name: name, MetricsProvider: cfg.Metrics, Queue: waiting})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[K]{Name: name, MetricsProvider: cfg.Metrics, Queue: base})
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[K](start, limit),
		workqueue.TypedRateLimitingQueueConfig[K]{Name: name, MetricsProvider: cfg.Metrics, DelayingQueue: delaying})
	out := &Queue[K]{TypedRateLimitingInterface: q, name: name, waiting: waiting}
	if m, ok := cfg.Metrics.(*QueueMetrics); ok && m != nil {
		out.metrics = m
		m.waiting.add(name, waiting)
	}
	return out
}

// ShutDown stops the queue (see workqueue.TypedInterface) and its waiting-age gauge.
func (q *Queue[K]) ShutDown() {
	q.TypedRateLimitingInterface.ShutDown()
	if q.metrics != nil {
		q.metrics.waiting.remove(q.waiting)
	}
}

// ShutDownWithDrain is ShutDown once the keys in flight are done.
func (q *Queue[K]) ShutDownWithDrain() {
	q.TypedRateLimitingInterface.ShutDownWithDrain()
	if q.metrics != nil {
		q.metrics.waiting.remove(q.waiting)
	}
}

// OldestWaiting is how long the oldest key counted in the queue's depth has been waiting
// for a worker (workqueue_longest_waiting_item_seconds); zero when none waits.
func (q *Queue[K]) OldestWaiting() time.Duration { return q.waiting.oldest() }

// Name is the queue's name, the "name" label of its metrics.
func (q *Queue[K]) Name() string { return q.name }

// QueueMetrics implements workqueue.MetricsProvider with the metric names, help texts and
// buckets of k8s.io/component-base/metrics/prometheus/workqueue, on a registry of ours
// rather than component-base's global one. Beside them it exports, for the queues built
// by NewQueue, workqueue_longest_waiting_item_seconds: the age of the oldest key waiting
// for a worker, the figure a backlog shows first.
type QueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
	waiting                    *waitingCollector
}

// NewQueueMetrics creates the workqueue_* metrics and registers them with reg (none when
// reg is nil). On a registry that has them already, it returns the registered ones, so
// every caller of one registry shares the same metrics.
func NewQueueMetrics(reg prometheus.Registerer) *QueueMetrics {
	const sub = "workqueue"
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: name, Help: help}, []string{"name"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: name, Help: help}, []string{"name"})
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: name, Help: help, Buckets: buckets}, []string{"name"})
	}
	m := &QueueMetrics{
		depth:      gauge("depth", "Current depth of workqueue"),
		adds:       counter("adds_total", "Total number of adds handled by workqueue"),
		retries:    counter("retries_total", "Total number of retries handled by workqueue"),
		latency:    histogram("queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested."),
		work:       histogram("work_duration_seconds", "How long in seconds processing an item from workqueue takes."),
		unfinished: gauge("unfinished_work_seconds", "How many seconds of work has done that is in progress and hasn't been observed by work_duration."),
		longest:    gauge("longest_running_processor_seconds", "How many seconds has the longest running processor for workqueue been running."),
		waiting:    newWaitingCollector(),
	}
	if reg != nil {
		m.depth, m.unfinished, m.longest = register(reg, m.depth), register(reg, m.unfinished), register(reg, m.longest)
		m.adds, m.retries = register(reg, m.adds), register(reg, m.retries)
		m.latency, m.work = register(reg, m.latency), register(reg, m.work)
		m.waiting = register(reg, m.waiting)
	}
	return m
}

// register registers c, or returns the collector of the same description reg already has.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if existing, ok := dup.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

func (m *QueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}
func (m *QueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}
func (m *QueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}
func (m *QueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name)
}
func (m *QueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}
func (m *QueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name)
}
func (m *QueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
