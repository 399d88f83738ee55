package controller

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fifo is the storage of a Queue's waiting keys: the first in, first out order of
// client-go's default queue, plus the time each key began to wait, so that the age of the
// oldest one can be read at any moment. client-go calls it under the queue's own lock; the
// scrape reads it from another goroutine, hence a lock of its own.
type fifo[K comparable] struct {
	mu    sync.Mutex
	keys  []K
	since []time.Time
	now   func() time.Time
}

func newFIFO[K comparable]() *fifo[K] { return &fifo[K]{now: time.Now} }

// Touch keeps a key that is added again where it is, as client-go's default queue does: it
// has waited since its first add.
func (f *fifo[K]) Touch(K) {}

func (f *fifo[K]) Push(key K) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, key)
	f.since = append(f.since, f.now())
}

func (f *fifo[K]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}

func (f *fifo[K]) Pop() K {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := f.keys[0]
	var zero K
	f.keys[0], f.since[0] = zero, time.Time{} // let the key be collected
	f.keys, f.since = f.keys[1:], f.since[1:]
	return key
}

// oldest is how long the key at the head has waited: the longest wait of any key counted in
// workqueue_depth, zero when none waits.
func (f *fifo[K]) oldest() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.since) == 0 {
		return 0
	}
	return f.now().Sub(f.since[0])
}

// waitingCollector exports workqueue_longest_waiting_item_seconds, the age of each queue's
// oldest waiting key, read at scrape time. client-go's workqueue has no such metric: its
// workqueue_queue_duration_seconds is observed only once a key is taken, so a key stuck
// behind a backlog shows there only after the backlog is gone.
type waitingCollector struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	queues map[interface{ oldest() time.Duration }]string
}

func newWaitingCollector() *waitingCollector {
	return &waitingCollector{
		desc: prometheus.NewDesc("workqueue_longest_waiting_item_seconds",
			"How many seconds has the longest waiting item in workqueue been waiting for a worker.", []string{"name"}, nil),
		queues: map[interface{ oldest() time.Duration }]string{},
	}
}

func (c *waitingCollector) add(name string, f interface{ oldest() time.Duration }) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queues[f] = name
}

func (c *waitingCollector) remove(f interface{ oldest() time.Duration }) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.queues, f)
}

func (c *waitingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reports one gauge per queue name; two queues of one name (two controllers on one
// registry) report the longer wait.
func (c *waitingCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	byName := map[string]time.Duration{}
	for f, name := range c.queues {
		byName[name] = max(byName[name], f.oldest())
	}
	c.mu.Unlock()
	for name, d := range byName {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, d.Seconds(), name)
	}
}
