// Package upstatus is the status file of a running `kubevol up`, <dir>/up-status.json: what
// up is doing (building the control plane, starting, ready, stopped, failed), rewritten
// while it starts, so that a `kubevol verify` started beside it knows whether the cluster it
// waits for is still on its way (a first run builds the control plane for many minutes) or
// will never come.
package upstatus

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kubevol/kubevol/internal/runtime/atomicfile"
)

// FileName is the status file in up's state directory.
const FileName = "up-status.json"

// Phase is what up is doing.
type Phase string

// Phases. Building and Starting are on the way to Ready; Stopped and Failed are final.
const (
	Building Phase = "building" // building the control-plane binary
	Starting Phase = "starting"
	Ready    Phase = "ready"
	Stopped  Phase = "stopped"
	Failed   Phase = "failed"
)

// Refresh is how often up rewrites the file while it builds or starts; StaleAfter is how
// old the file of a live up can be. A building or starting status older than that is of an
// up that is gone (killed with -9, or whose pid was reused).
const (
	Refresh    = 10 * time.Second
	StaleAfter = 6 * Refresh
)

// Status is the content of the file.
type Status struct {
	PID   int   `json:"pid"`
	Phase Phase `json:"phase"`
	// Detail is the last progress line up printed (the build's "building: 812/1893
	// packages compiled, 4m0s elapsed"), or the error of a failed start.
	Detail string `json:"detail,omitempty"`
	// Since is when the phase began, Updated when the file was last written.
	Since   time.Time `json:"since"`
	Updated time.Time `json:"updated"`
}

// OnTheWay reports whether the up of s is still on its way to ready: it says it is
// building or starting, it was written in the last StaleAfter, and its process lives.
func (s Status) OnTheWay(now time.Time, alive func(pid int) bool) bool {
	if s.Phase != Building && s.Phase != Starting {
		return false
	}
	return now.Sub(s.Updated) < StaleAfter && alive(s.PID)
}

// Alive reports whether process pid exists (signal 0, as kill -0).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Read reads the status file of the up whose state directory is dir.
func Read(dir string) (Status, error) {
	var s Status
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// Writer keeps the status file of this process's up: rewritten at each change and, while
// building or starting, every Refresh. As an io.Writer it takes up's progress output, whose
// last line becomes the Detail.
type Writer struct {
	path string
	now  func() time.Time

	mu      sync.Mutex
	st      Status
	partial string
	closed  bool

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// Start writes the file in dir, phase Starting, and rewrites it every Refresh until the
// phase is Ready or Close is called.
func Start(dir string) (*Writer, error) {
	now := time.Now()
	w := &Writer{path: filepath.Join(dir, FileName), now: time.Now,
		st:   Status{PID: os.Getpid(), Phase: Starting, Since: now},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := w.write(); err != nil {
		return nil, err
	}
	go w.refresh()
	return w, nil
}

func (w *Writer) refresh() {
	defer close(w.done)
	t := time.NewTicker(Refresh)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if w.st.Phase == Building || w.st.Phase == Starting {
				_ = w.writeLocked()
			}
			w.mu.Unlock()
		}
	}
}

// Set changes the phase; detail replaces the Detail.
func (w *Writer) Set(p Phase, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if p != w.st.Phase {
		w.st.Since = w.now()
	}
	w.st.Phase, w.st.Detail = p, detail
	_ = w.writeLocked()
}

// Close writes the final phase (Stopped or Failed) and stops the rewriting. A later Close
// overwrites an earlier one: a start that fails stops what it started, then says why.
func (w *Writer) Close(p Phase, detail string) {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	w.st.Since, w.st.Phase, w.st.Detail = w.now(), p, detail
	_ = w.writeLocked()
	w.closed = true
}

// Write takes progress output: its last complete non-empty line becomes the Detail, and
// the file is rewritten (a build prints a line every 15 s).
func (w *Writer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := strings.Split(w.partial+string(b), "\n")
	w.partial = lines[len(lines)-1]
	for i := len(lines) - 2; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			if !w.closed && l != w.st.Detail {
				w.st.Detail = l
				_ = w.writeLocked()
			}
			break
		}
	}
	return len(b), nil
}

func (w *Writer) write() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked()
}

func (w *Writer) writeLocked() error {
	w.st.Updated = w.now()
	data, err := json.Marshal(w.st)
	if err != nil {
		return err
	}
	return atomicfile.Write(w.path, append(data, '\n'), 0o644)
}
