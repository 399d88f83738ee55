package csisnapshotter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// At most one holder per volume, any number across volumes; the map does not grow.
func TestVolumeLocks(t *testing.T) {
	var l volumeLocks
	var inUse [2]atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			v := i % 2
			unlock, err := l.lock(context.Background(), []string{"a", "b"}[v])
			if err != nil {
				t.Error(err)
				return
			}
			if n := inUse[v].Add(1); n != 1 {
				t.Errorf("%d holders of one volume", n)
			}
			inUse[v].Add(-1)
			unlock()
		})
	}
	wg.Wait()
	if len(l.locks) != 0 {
		t.Errorf("%d locks left", len(l.locks))
	}
	unlock, _ := l.lock(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.lock(ctx, "a"); err == nil {
		t.Error("a second lock of a held volume with an ended context succeeded")
	}
	unlock()
	if len(l.locks) != 0 {
		t.Errorf("%d locks left", len(l.locks))
	}
}
