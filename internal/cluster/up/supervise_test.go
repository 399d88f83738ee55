package up

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestBackoff(t *testing.T) {
	b := DefaultBackoff
	var got []time.Duration
	d := time.Duration(0)
	for range 11 {
		d = b.next(d, time.Second)
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff sequence %v, want %v seconds", got, want)
		}
	}
	if d := b.next(5*time.Minute, 10*time.Minute); d != time.Second {
		t.Errorf("after 10 min of running the backoff is %s, want it reset to 1s", d)
	}
}

// TestSuperviseRestarts kills a supervised process and sees it come back, then stops it
// for good.
func TestSuperviseRestarts(t *testing.T) {
	c := newComponent("sleeper", "sleep", []string{"60"}, filepath.Join(t.TempDir(), "log"), "")
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	go c.supervise(Backoff{Initial: 10 * time.Millisecond, Max: time.Second, ResetAfter: time.Hour}, func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	})
	first := c.current()
	if err := syscall.Kill(first.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.restarts == 1 && c.p != first, nil
	})
	if err != nil {
		t.Fatalf("not restarted after SIGKILL: %v", err)
	}
	mu.Lock()
	if len(lines) != 1 || !strings.Contains(lines[0], "sleeper exited (signal SIGKILL)") {
		t.Errorf("reported %q, want one line naming the exit", lines)
	}
	mu.Unlock()
	second := c.current()
	if second.Exited() {
		t.Fatal("the restarted process is not running")
	}
	if err := c.stop(time.Second); err != nil {
		t.Fatal(err)
	}
	<-c.loopDone
	if !second.Exited() || c.current() != second {
		t.Error("stop left the process running or restarted it")
	}
}
