package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Source fills the caches a controller reads and calls its event handlers.
type Source interface {
	// Start begins filling the source and returns at once; the source stops when ctx ends.
	Start(ctx context.Context)
	// WaitForSync blocks until the source holds its initial state, or until ctx ends, and
	// reports whether it synced.
	WaitForSync(ctx context.Context) bool
}

// Informers is the Source of a shared informer factory: it starts every informer obtained
// from the factory before Run and is synced when they all are. Run shuts the factory down
// once its workers have stopped.
func Informers(f informers.SharedInformerFactory) Source { return factorySource{f} }

type factorySource struct {
	f informers.SharedInformerFactory
}

func (s factorySource) Start(ctx context.Context) { s.f.StartWithContext(ctx) }
func (s factorySource) WaitForSync(ctx context.Context) bool {
	return s.f.WaitForCacheSyncWithContext(ctx).Err == nil
}
func (s factorySource) Shutdown() { s.f.Shutdown() }

// ChanInformers is the Source of a shared informer factory generated without the
// context-taking methods (the snapshot API's): it starts and waits through the stop channel
// of the context.
func ChanInformers(f ChanInformerFactory) Source { return chanFactorySource{f} }

// ChanInformerFactory is what ChanInformers needs of a generated informer factory.
type ChanInformerFactory interface {
	Start(stopCh <-chan struct{})
	WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool
	Shutdown()
}

type chanFactorySource struct {
	f ChanInformerFactory
}

func (s chanFactorySource) Start(ctx context.Context) { s.f.Start(ctx.Done()) }

func (s chanFactorySource) WaitForSync(ctx context.Context) bool {
	for _, ok := range s.f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return false
		}
	}
	return true
}

func (s chanFactorySource) Shutdown() { s.f.Shutdown() }

// Synced is a Source that starts nothing and is synced once every function reports true:
// the caches a controller reads, on informers that another Source (or the caller) starts.
func Synced(synced ...cache.InformerSynced) Source { return syncedSource(synced) }

type syncedSource []cache.InformerSynced

func (syncedSource) Start(context.Context) {}
func (s syncedSource) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s...)
}

// Sync brings the object of one key to its desired state. See the package doc for what
// its result means.
type Sync[K comparable] func(ctx context.Context, key K) error

// RetryAfter is the result of a sync that wants its key looked at again after d, without
// backoff: the sync did nothing wrong, it waits for something to happen.
func RetryAfter(d time.Duration) error { return &retryAfter{d} }

type retryAfter struct{ d time.Duration }

func (r *retryAfter) Error() string { return fmt.Sprintf("retry after %s", r.d) }

// Runner runs the sources, workers and periodic functions of one component. Register
// everything, then call Run once.
type Runner struct {
	name    string
	sources []Source
	queues  []interface{ ShutDown() }
	workers []func(context.Context)
	loops   []func(context.Context)
}

// NewRunner returns an empty Runner; name identifies it in logs.
func NewRunner(name string) *Runner { return &Runner{name: name} }

// AddSource adds sources that Run starts and waits for before any worker runs.
func (r *Runner) AddSource(s ...Source) { r.sources = append(r.sources, s...) }

// Handle makes workers goroutines (at least one) take keys from q and sync them.
func Handle[K comparable](r *Runner, q *Queue[K], workers int, sync Sync[K]) {
	r.queues = append(r.queues, q)
	for range max(workers, 1) {
		r.workers = append(r.workers, func(ctx context.Context) {
			for processNext(ctx, q, sync) {
			}
		})
	}
}

// Every calls f once the sources have synced, and again period after each call returned,
// until Run ends.
func (r *Runner) Every(period time.Duration, f func(context.Context)) {
	r.loops = append(r.loops, func(ctx context.Context) { wait.UntilWithContext(ctx, f, period) })
}

// Run starts the sources, waits for them to sync, and runs the workers and periodic
// functions until ctx ends. Then it drains: the queues shut down, the syncs in flight
// finish (a key still queued is left for the next start, as sync is level-triggered), and
// only then does Run return, so that what the syncs use may be closed after it.
func (r *Runner) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("controller", r.name)
	defer r.stopSources()
	defer r.shutDownQueues()
	for _, s := range r.sources {
		s.Start(ctx)
	}
	logger.V(2).Info("Waiting for the sources to sync", "sources", len(r.sources))
	for _, s := range r.sources {
		if !s.WaitForSync(ctx) {
			if ctx.Err() != nil {
				return nil
			}
			return errors.New(r.name + ": a source stopped before it synced")
		}
	}
	logger.Info("Starting workers", "workers", len(r.workers), "periodic", len(r.loops))
	var wg sync.WaitGroup
	for _, f := range append(r.workers, r.loops...) {
		wg.Go(func() {
			defer utilruntime.HandleCrashWithContext(ctx)
			f(ctx)
		})
	}
	<-ctx.Done()
	logger.Info("Stopping workers")
	r.shutDownQueues()
	wg.Wait()
	return nil
}

func (r *Runner) shutDownQueues() {
	for _, q := range r.queues {
		q.ShutDown()
	}
}

func (r *Runner) stopSources() {
	for _, s := range r.sources {
		if s, ok := s.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	}
}

// processNext takes one key and syncs it; it returns false once the queue has shut down.
func processNext[K comparable](ctx context.Context, q *Queue[K], sync Sync[K]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if ctx.Err() != nil {
		return true // shutting down: the key is synced again after the next start
	}
	if x := q.exclusive; x != nil {
		if !x.acquire(q, key) {
			return true // another queue syncs it, and gives it back when done
		}
		defer x.release(key)
	}
	err := sync(ctx, key)
	var after *retryAfter
	switch {
	case err == nil:
		q.Forget(key)
	case errors.As(err, &after):
		q.Forget(key)
		q.AddAfter(key, after.d)
	default:
		klog.FromContext(ctx).V(2).Info("Sync failed, will retry", "queue", q.name, "key", key, "err", err, "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
	}
	return true
}
