package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubevol/kubevol/internal/runtime/controller/queuetest"
)

// Two queues made Exclusive never sync one key at once: a key added to the second while
// the first syncs it is synced by the second only after the first's sync returned, and it
// is not lost. The second queue's worker is not held meanwhile: it syncs other keys.
func TestExclusiveQueues(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attach := NewQueue[string]("attach", QueueConfig{})
	detach := NewQueue[string]("detach", QueueConfig{})
	Exclusive(attach, detach)
	var inFlight, overlaps atomic.Int32
	inAttach, release := make(chan string, 1), make(chan struct{})
	detached := make(chan string, 4)
	r := NewRunner("exclusive")
	Handle(r, attach, 1, func(_ context.Context, key string) error {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inFlight.Add(-1)
		inAttach <- key
		<-release
		return nil
	})
	Handle(r, detach, 1, func(_ context.Context, key string) error {
		if key == "va" {
			if inFlight.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer inFlight.Add(-1)
		}
		detached <- key
		return nil
	})
	done := run(ctx, r)
	attach.Add("va")
	recv(t, inAttach, "attach sync")
	detach.Add("va")    // deleted while its attach runs
	detach.Add("other") // queued behind it, synced by the same, single detach worker
	if got := recv(t, detached, "detach of another key"); got != "other" {
		t.Fatalf("detach synced %q while va's attach was in flight, want only other", got)
	}
	close(release)
	if got := recv(t, detached, "detach handed back"); got != "va" {
		t.Fatalf("detach synced %q, want va once its attach returned", got)
	}
	if overlaps.Load() != 0 {
		t.Error("va was synced by both queues at once")
	}
	cancel()
	recv(t, done, "Run return")
}

// workqueue_longest_waiting_item_seconds is the age of the oldest key counted in
// workqueue_depth: zero when none waits, that key's wait (not a later one's) while keys
// wait, and gone with the queue.
func TestQueueLongestWaiting(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := NewQueue[string]("claims", QueueConfig{Metrics: NewQueueMetrics(reg)})
	clock := time.Unix(1000, 0)
	q.waiting.now = func() time.Time { return clock }
	if got := queuetest.Value(t, reg, "workqueue_longest_waiting_item_seconds", "claims"); got != 0 {
		t.Errorf("empty queue: %v, want 0", got)
	}
	q.Add("a")
	clock = clock.Add(30 * time.Second)
	q.Add("b")
	q.Add("a") // added again: it keeps its place and its age
	clock = clock.Add(10 * time.Second)
	if got := queuetest.Value(t, reg, "workqueue_longest_waiting_item_seconds", "claims"); got != 40 {
		t.Errorf("a waited 40s: %v", got)
	}
	if got := queuetest.Value(t, reg, "workqueue_depth", "claims"); got != 2 {
		t.Errorf("workqueue_depth = %v, want 2", got)
	}
	key, _ := q.Get()
	if key != "a" {
		t.Fatalf("Get = %q, want the first in", key)
	}
	if got := q.OldestWaiting(); got != 10*time.Second {
		t.Errorf("b waited 10s: %v", got)
	}
	q.Done(key)
	key, _ = q.Get()
	q.Done(key)
	if got := queuetest.Value(t, reg, "workqueue_longest_waiting_item_seconds", "claims"); got != 0 {
		t.Errorf("drained queue: %v, want 0", got)
	}
	q.ShutDown()
	if got := queuetest.Value(t, reg, "workqueue_longest_waiting_item_seconds", "claims"); got != -1 {
		t.Errorf("a shut-down queue still reports %v", got)
	}
}
