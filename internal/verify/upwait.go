package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/upstatus"
)

// upWait bounds verify's waits for a kubevol up started just before it. --wait counts only
// from when up stops saying, in its status file (internal/cluster/upstatus), that it is building
// the control plane or starting: a first `kubevol up` builds the control plane for many
// minutes, which no fixed wait fits. An up that died, was killed or hangs with its file
// unrefreshed no longer extends the wait, and --wait then bounds it as for a cluster that
// is not a kubevol up (--kubeconfig), which has no status file.
type upWait struct {
	wait     time.Duration
	deadline time.Time
	// read reads up's status; nil when there is no kubevol up to wait for (--kubeconfig).
	read     func() (upstatus.Status, error)
	alive    func(pid int) bool
	progress io.Writer

	// last is the status last seen; noted the one last printed, at notedAt.
	last      upstatus.Status
	seen      bool
	noted     upstatus.Status
	notedAt   time.Time
	noteEvery time.Duration
}

func newUpWait(o Options, now time.Time) *upWait {
	w := &upWait{wait: o.Wait, deadline: now.Add(o.Wait), alive: upstatus.Alive, progress: o.Progress, noteEvery: time.Minute}
	if w.progress == nil {
		w.progress = io.Discard
	}
	if o.Kubeconfig == "" {
		dir := o.Dir
		w.read = func() (upstatus.Status, error) { return upstatus.Read(dir) }
	}
	return w
}

// expired reports, at now, whether the wait is over; while up is on its way, the deadline
// moves to now plus --wait, and a line says what up is doing.
func (w *upWait) expired(now time.Time) bool {
	if w.read != nil {
		if st, err := w.read(); err == nil {
			w.last, w.seen = st, true
			if st.OnTheWay(now, w.alive) {
				if d := now.Add(w.wait); d.After(w.deadline) {
					w.deadline = d
				}
				w.note(now, st)
			}
		}
	}
	return !now.Before(w.deadline)
}

// note prints what up is doing when its process or phase changes, and its progress at
// most once a noteEvery.
func (w *upWait) note(now time.Time, st upstatus.Status) {
	switch {
	case st.PID != w.noted.PID || st.Phase != w.noted.Phase:
		what := "is starting"
		if st.Phase == upstatus.Building {
			what = "is building its control plane (first run only)"
		}
		fmt.Fprintf(w.progress, "verify: kubevol up (pid %d) %s; waiting for it, then up to --wait %s\n", st.PID, what, w.wait)
	case st.Detail != "" && st.Detail != w.noted.Detail && now.Sub(w.notedAt) >= w.noteEvery:
		fmt.Fprintf(w.progress, "verify: kubevol up: %s\n", st.Detail)
	default:
		return
	}
	w.noted, w.notedAt = st, now
}

// restart starts a new --wait at now, for the next thing verify waits for.
func (w *upWait) restart(now time.Time) { w.deadline = now.Add(w.wait) }

// why says, for the error of a wait that expired, what up's status file said.
func (w *upWait) why() string {
	if w.read == nil {
		return ""
	}
	if !w.seen {
		return "; no kubevol up status file in this --dir"
	}
	st := w.last
	s := fmt.Sprintf("; kubevol up's last status: %s", st.Phase)
	if st.Detail != "" {
		s += " (" + st.Detail + ")"
	}
	if (st.Phase == upstatus.Building || st.Phase == upstatus.Starting) && !w.alive(st.PID) {
		s += fmt.Sprintf(", and its process %d is gone", st.PID)
	}
	return s
}

// errWaitExpired is returned by pollUp when the wait is over.
var errWaitExpired = errors.New("wait expired")

// pollUp calls cond every 200 ms until it is done, fails, or w's wait is over.
func pollUp(ctx context.Context, w *upWait, cond func(context.Context) (bool, error)) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if done, err := cond(ctx); err != nil || done {
			return err
		}
		if w.expired(time.Now()) {
			return errWaitExpired
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
