package executor

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubevol/kubevol/pkg/volume"
)

func TestExecutorSerializesAndBacksOff(t *testing.T) {
	e := New(Config{Timeout: time.Second, Parallelism: 4, MaxForbiddenBackoff: 2 * time.Second})
	now := time.Now()
	e.now = func() time.Time { return now }
	release := make(chan struct{})
	done := make(chan error, 10)
	run := func(key OpKey, name string, err error) error {
		return e.Run(context.Background(), Operation{Key: key, Name: name,
			Run:  func(context.Context) error { <-release; return err },
			Done: func(err error) { done <- err }})
	}
	if err := run(OpKey{"v", "p1"}, "volume_mount", errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if err := run(OpKey{"v", "p1"}, "volume_mount", nil); !errors.Is(err, ErrPending) {
		t.Errorf("same key: %v", err)
	}
	if err := run(OpKey{"v", ""}, "volume_mount", nil); !errors.Is(err, ErrPending) {
		t.Errorf("wildcard: %v", err)
	}
	close(release)
	<-done
	if err := run(OpKey{"v", "p2"}, "volume_mount", nil); err != nil {
		t.Errorf("other pod: %v", err)
	}
	<-done
	var be *BackoffError
	if err := run(OpKey{"v", "p1"}, "volume_mount", nil); !errors.As(err, &be) || be.Until.Sub(now) != InitialBackoff {
		t.Fatalf("backoff: %v", err)
	}
	// Doubling up to the cap.
	delays := []time.Duration{}
	for i := 0; i < 12; i++ {
		now = now.Add(MaxBackoff)
		if err := run(OpKey{"v", "p1"}, "volume_mount", errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		<-done
		e.mu.Lock()
		delays = append(delays, e.backoff[OpKey{"v", "p1"}].delay)
		e.mu.Unlock()
	}
	if delays[0] != 2*InitialBackoff || delays[len(delays)-1] != MaxBackoff {
		t.Errorf("delays %v", delays)
	}
	// Another operation on the key is not held back.
	if err := run(OpKey{"v", "p1"}, "volume_unmount", nil); err != nil {
		t.Errorf("unmount held back by a failing mount: %v", err)
	}
	<-done
	// A refusal (the node graph lagging behind a new pod) is retried within seconds.
	refused := fmt.Errorf("request token: %w", apierrors.NewForbidden(v1.Resource("serviceaccounts/token"), "default", errors.New("no relationship found")))
	for i := 0; i < 12; i++ {
		now = now.Add(MaxBackoff)
		if err := run(OpKey{"v", "p3"}, "volume_mount", refused); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	if err := run(OpKey{"v", "p3"}, "volume_mount", nil); !errors.As(err, &be) || be.Until.Sub(now) != 2*time.Second {
		t.Errorf("backoff after refusals: %v, want %v", err, 2*time.Second)
	}
}

func TestExecutorTimeoutIsUncertain(t *testing.T) {
	e := New(Config{Timeout: 20 * time.Millisecond, Parallelism: 1})
	done := make(chan error, 1)
	var ran atomic.Bool
	err := e.Run(context.Background(), Operation{Key: OpKey{Volume: "v"}, Name: "volume_mount",
		Run:  func(ctx context.Context) error { ran.Store(true); <-ctx.Done(); return ctx.Err() },
		Done: func(err error) { done <- err }})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !volume.IsUncertain(err) || !ran.Load() {
		t.Errorf("timeout gave %v", err)
	}
}
