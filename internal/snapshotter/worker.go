package snapshotter

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// NewQueue is a work queue whose keys back off exponentially, each on its own, between start
// and max (upstream --retry-interval-start and --retry-interval-max).
func NewQueue(name string, start, max time.Duration) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](start, max),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// RunWorkers runs n workers that sync the keys of q until ctx ends: a failed key is retried
// with its backoff, a synced one is forgotten. It blocks until ctx ends and shuts q down.
func RunWorkers(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], n int, what string, sync func(context.Context, string) error) {
	defer q.ShutDown()
	logger := klog.FromContext(ctx)
	for range n {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				err := sync(ctx, key)
				if err == nil {
					q.Forget(key)
				} else {
					logger.V(2).Info("Sync failed, will retry", what, key, "err", err, "retries", q.NumRequeues(key))
					q.AddRateLimited(key)
				}
				q.Done(key)
			}
		}, time.Second)
	}
	<-ctx.Done()
}
