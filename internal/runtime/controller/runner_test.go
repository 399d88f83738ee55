package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/internal/runtime/controller/queuetest"
)

// gate is a Source that syncs when the test opens it: no watch, no informer.
type gate struct {
	started atomic.Bool
	open    chan struct{}
	stopped atomic.Bool
}

func newGate() *gate                  { return &gate{open: make(chan struct{})} }
func (g *gate) Start(context.Context) { g.started.Store(true) }
func (g *gate) Shutdown()             { g.stopped.Store(true) }
func (g *gate) synced() bool {
	select {
	case <-g.open:
		return true
	default:
		return false
	}
}
func (g *gate) WaitForSync(ctx context.Context) bool {
	select {
	case <-g.open:
		return true
	case <-ctx.Done():
		return false
	}
}

// run starts r.Run in the background and returns a channel that receives its result.
func run(ctx context.Context, r *Runner) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return done
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute): // a hang guard, not a timing goal
		t.Fatalf("no %s within a minute", what)
		panic("unreachable")
	}
}

// A worker over a queue of pod UIDs with a hand-made source: no sync before the source
// syncs, then every key synced.
func TestRunnerWaitsForSourcesWithoutInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := newGate()
	q := NewQueue[types.UID]("pods", QueueConfig{})
	synced := make(chan types.UID, 2)
	var early atomic.Bool
	r := NewRunner("pods")
	r.AddSource(src)
	Handle(r, q, 2, func(_ context.Context, uid types.UID) error {
		if !src.synced() {
			early.Store(true)
		}
		synced <- uid
		return nil
	})
	q.Add("uid-a")
	done := run(ctx, r)
	q.Add("uid-b")
	close(src.open)
	got := map[types.UID]bool{recv(t, synced, "sync"): true, recv(t, synced, "sync"): true}
	if !got["uid-a"] || !got["uid-b"] {
		t.Errorf("synced %v, want uid-a and uid-b", got)
	}
	if early.Load() || !src.started.Load() {
		t.Error("a key was synced before its source synced, or the source was never started")
	}
	cancel()
	if err := recv(t, done, "Run return"); err != nil {
		t.Errorf("Run: %v", err)
	}
	if !src.stopped.Load() {
		t.Error("the source was not shut down")
	}
}

// The three results of a sync: an error retries with backoff, RetryAfter comes back with
// the backoff forgotten, nil forgets the key.
func TestRunnerSyncResults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := NewQueue[string]("results", QueueConfig{RetryIntervalStart: time.Millisecond, RetryIntervalMax: time.Millisecond})
	type call struct {
		key      string
		requeues int
	}
	calls := make(chan call, 10)
	n := 0
	r := NewRunner("results")
	Handle(r, q, 1, func(_ context.Context, key string) error {
		calls <- call{key, q.NumRequeues(key)}
		n++
		switch n {
		case 1, 2:
			return errors.New("driver busy")
		case 3:
			return RetryAfter(time.Millisecond)
		default:
			return nil
		}
	})
	q.Add("k")
	done := run(ctx, r)
	want := []int{0, 1, 2, 0} // two failures count up; RetryAfter forgets them
	for i, w := range want {
		if c := recv(t, calls, "sync"); c.key != "k" || c.requeues != w {
			t.Errorf("call %d: key %q with %d requeues, want k with %d", i, c.key, c.requeues, w)
		}
	}
	cancel()
	recv(t, done, "Run return")
	if q.NumRequeues("k") != 0 {
		t.Error("a successful sync did not forget the key's backoff")
	}
	if len(calls) != 0 {
		t.Errorf("%d syncs after the successful one", len(calls))
	}
}

// Shutdown drains: Run returns only after the sync in flight returned, and keys still
// queued are not synced with a cancelled context.
func TestRunnerDrains(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := NewQueue[string]("drain", QueueConfig{})
	inSync, release := make(chan string, 4), make(chan struct{})
	var returned atomic.Bool
	var syncedAfterReturn, syncedQueued atomic.Bool
	r := NewRunner("drain")
	Handle(r, q, 1, func(ctx context.Context, key string) error {
		if key != "first" {
			syncedQueued.Store(true)
		}
		inSync <- key
		<-release
		if returned.Load() {
			syncedAfterReturn.Store(true)
		}
		return nil
	})
	q.Add("first")
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); returned.Store(true); close(done) }()
	recv(t, inSync, "first sync")
	q.Add("second")
	cancel()
	close(release)
	recv(t, done, "Run return")
	if syncedAfterReturn.Load() {
		t.Error("Run returned while a sync was in flight")
	}
	if syncedQueued.Load() {
		t.Error("a key queued at shutdown was synced with a cancelled context")
	}
}

// Every runs after the sources synced, and again after its period.
func TestRunnerEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := newGate()
	ticks := make(chan bool, 3)
	r := NewRunner("every")
	r.AddSource(src)
	var n atomic.Int32
	r.Every(time.Millisecond, func(context.Context) {
		if n.Add(1) <= 2 {
			ticks <- src.synced()
		}
	})
	done := run(ctx, r)
	close(src.open)
	for range 2 {
		if !recv(t, ticks, "periodic call") {
			t.Error("a periodic function ran before the sources synced")
		}
	}
	cancel()
	recv(t, done, "Run return")
}

// A source that ends before it syncs, while Run's context is alive, fails Run; a context
// that ends first is a clean stop.
func TestRunnerSourceFails(t *testing.T) {
	r := NewRunner("fails")
	r.AddSource(failing{})
	if err := r.Run(context.Background()); err == nil {
		t.Error("Run returned nil although its source never synced")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = NewRunner("stopped")
	r.AddSource(newGate())
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run after its context ended: %v, want nil", err)
	}
}

type failing struct{}

func (failing) Start(context.Context)            {}
func (failing) WaitForSync(context.Context) bool { return false }

// Informers: handlers registered on a factory's informers feed the queue, and the sync
// reads a synced cache.
func TestRunnerInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"}})
	factory := informers.NewSharedInformerFactory(cs, 0)
	pods := factory.Core().V1().Pods()
	q := NewQueue[string]("pods", QueueConfig{})
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		q.Add(key)
	}}); err != nil {
		t.Fatal(err)
	}
	found := make(chan types.UID, 1)
	r := NewRunner("informers")
	r.AddSource(Informers(factory))
	Handle(r, q, 1, func(_ context.Context, key string) error {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		pod, err := pods.Lister().Pods(ns).Get(name)
		if err != nil {
			return err
		}
		found <- pod.UID
		return nil
	})
	done := run(ctx, r)
	if uid := recv(t, found, "sync"); uid != "uid-p" {
		t.Errorf("synced pod %s, want uid-p", uid)
	}
	cancel()
	recv(t, done, "Run return")
}

// A queue given QueueMetrics exports upstream's workqueue_* metrics under its name.
func TestQueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewQueueMetrics(reg)
	q := NewQueue[string]("volumeattachments", QueueConfig{Metrics: m})
	q.Add("a")
	key, _ := q.Get()
	q.Done(key)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "volumeattachments" {
					got[f.GetName()] = true
				}
			}
		}
	}
	for _, name := range []string{"workqueue_depth", "workqueue_adds_total", "workqueue_retries_total", "workqueue_queue_duration_seconds",
		"workqueue_work_duration_seconds", "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds",
		"workqueue_longest_waiting_item_seconds"} {
		if !got[name] {
			t.Errorf("no %s{name=\"volumeattachments\"}", name)
		}
	}
	if q.Name() != "volumeattachments" {
		t.Errorf("Name() = %q", q.Name())
	}
	// A second provider on the same registry shares the metrics instead of panicking.
	NewQueueMetrics(reg).NewAddsMetric("volumeattachments").Inc()
	if got := queuetest.Value(t, reg, "workqueue_adds_total", "volumeattachments"); got != 2 {
		t.Errorf("workqueue_adds_total = %v after an add through each provider, want 2", got)
	}
}

// NewEventRecorder writes events to the API with the component as their source.
func TestEventRecorder(t *testing.T) {
	cs := fake.NewClientset()
	created := make(chan *corev1.Event, 1)
	var once sync.Once
	cs.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { created <- a.(k8stesting.CreateAction).GetObject().(*corev1.Event) })
		return false, nil, nil
	})
	recorder, stop := NewEventRecorder(context.Background(), cs, "kubevol-test driver.example.com")
	defer stop()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	recorder.Event(pod, corev1.EventTypeWarning, "Failed", "it broke")
	ev := recv(t, created, "event")
	if ev.Source.Component != "kubevol-test driver.example.com" || ev.Reason != "Failed" || ev.InvolvedObject.Name != "p" {
		t.Errorf("event %+v", ev)
	}
}
