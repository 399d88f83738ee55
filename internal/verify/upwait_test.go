package verify

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/upstatus"
)

// fixedWait is a wait of d from now with no kubevol up to extend it (--kubeconfig).
func fixedWait(d time.Duration) *upWait {
	return newUpWait(Options{Wait: d, Kubeconfig: "elsewhere"}, time.Now())
}

// fakeUp is the status file and process table verify sees, as a test sets them.
type fakeUp struct {
	st    *upstatus.Status
	alive bool
}

func (f *fakeUp) wait(start time.Time, d time.Duration, out io.Writer) *upWait {
	w := newUpWait(Options{Wait: d, Dir: "/nonexistent", Progress: out}, start)
	w.read = func() (upstatus.Status, error) {
		if f.st == nil {
			return upstatus.Status{}, fs.ErrNotExist
		}
		return *f.st, nil
	}
	w.alive = func(pid int) bool { return f.alive && pid == 42 }
	return w
}

// at is the status file of up pid 42 in phase p, written at t.
func at(p upstatus.Phase, t time.Time, detail string) *upstatus.Status {
	return &upstatus.Status{PID: 42, Phase: p, Detail: detail, Since: t, Updated: t}
}

func TestUpWaitWithoutStatusIsFixed(t *testing.T) {
	start := time.Now()
	w := (&fakeUp{}).wait(start, 5*time.Minute, io.Discard)
	if w.expired(start.Add(5*time.Minute - time.Second)) {
		t.Fatal("expired before --wait")
	}
	if !w.expired(start.Add(5 * time.Minute)) {
		t.Fatal("not expired after --wait with no status file")
	}
	if got := w.why(); !strings.Contains(got, "no kubevol up status file") {
		t.Errorf("why = %q", got)
	}
	if k := fixedWait(time.Minute); k.read != nil || !k.expired(time.Now().Add(time.Minute)) {
		t.Error("--kubeconfig: the wait must be --wait, whatever the directory holds")
	}
}

func TestUpWaitWaitsWhileUpBuilds(t *testing.T) {
	start := time.Now()
	var out strings.Builder
	up := &fakeUp{alive: true}
	w := up.wait(start, 5*time.Minute, &out)
	// A cold up builds for 25 minutes, refreshing its file; verify keeps waiting.
	var now time.Time
	for m := 0; m <= 25; m++ {
		now = start.Add(time.Duration(m) * time.Minute)
		up.st = at(upstatus.Building, now, "building: "+time.Duration(m*int(time.Minute)).String())
		if w.expired(now) {
			t.Fatalf("expired at minute %d while up builds", m)
		}
	}
	// Then it starts and is ready: --wait counts from the last time it was on its way.
	up.st = at(upstatus.Starting, now, "")
	if w.expired(now.Add(30 * time.Second)) {
		t.Fatal("expired while up starts")
	}
	last := now.Add(30 * time.Second)
	up.st = at(upstatus.Ready, last, "")
	if w.expired(last.Add(5*time.Minute - time.Second)) {
		t.Fatal("expired before --wait after up was ready")
	}
	if !w.expired(last.Add(5*time.Minute + time.Second)) {
		t.Fatal("a ready up whose API never answers must not extend the wait")
	}
	text := out.String()
	if n := strings.Count(text, "is building its control plane"); n != 1 {
		t.Errorf("the building line was printed %d times, want once:\n%s", n, text)
	}
	if !strings.Contains(text, "kubevol up (pid 42) is starting") {
		t.Errorf("no line for the start:\n%s", text)
	}
	// Progress at most once a minute: about 25 over 25 minutes, not one per poll.
	if n := strings.Count(text, "verify: kubevol up: building:"); n < 10 || n > 26 {
		t.Errorf("%d progress lines over 25 minutes:\n%s", n, text)
	}
}

func TestUpWaitBoundsAnUpThatDied(t *testing.T) {
	start := time.Now()
	for _, tc := range []struct {
		name  string
		up    *fakeUp
		check func(now time.Time) *upstatus.Status
		why   string
	}{
		{"process gone", &fakeUp{alive: false},
			func(now time.Time) *upstatus.Status { return at(upstatus.Building, now, "building: 10/1900") }, "process 42 is gone"},
		{"file not refreshed (killed, pid reused)", &fakeUp{alive: true},
			func(time.Time) *upstatus.Status { return at(upstatus.Building, start, "building: 10/1900") }, "last status: building (building: 10/1900)"},
		{"start failed", &fakeUp{alive: true},
			func(now time.Time) *upstatus.Status { return at(upstatus.Failed, now, "etcd: not ready") }, "last status: failed (etcd: not ready)"},
		{"stopped", &fakeUp{alive: true},
			func(now time.Time) *upstatus.Status { return at(upstatus.Stopped, now, "") }, "last status: stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.up.wait(start, 5*time.Minute, io.Discard)
			expiredAt := time.Duration(-1)
			for s := 0; s <= 20*60; s += 10 {
				now := start.Add(time.Duration(s) * time.Second)
				tc.up.st = tc.check(now)
				if w.expired(now) {
					expiredAt = now.Sub(start)
					break
				}
			}
			if expiredAt < 0 || expiredAt > 5*time.Minute+upstatus.StaleAfter {
				t.Fatalf("expired at %v, want within --wait (plus the file's staleness)", expiredAt)
			}
			if got := w.why(); !strings.Contains(got, tc.why) {
				t.Errorf("why = %q, want it to say %q", got, tc.why)
			}
		})
	}
}

func TestPollUpStopsWhenDone(t *testing.T) {
	calls := 0
	err := pollUp(t.Context(), fixedWait(time.Minute), func(context.Context) (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("pollUp = %v after %d calls, want nil after 3", err, calls)
	}
	boom := errors.New("boom")
	if err := pollUp(t.Context(), fixedWait(time.Minute), func(context.Context) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("pollUp = %v, want the condition's error", err)
	}
	if err := pollUp(t.Context(), fixedWait(0), func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, errWaitExpired) {
		t.Fatalf("pollUp = %v, want errWaitExpired", err)
	}
}
