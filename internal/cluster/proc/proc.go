// Package proc runs child processes that cannot outlive their parent: each runs in its own
// process group, which Stop and Kill signal as a whole, and the kernel kills it (Pdeathsig)
// if the process that started it dies, so a crashed test or `kubevol up` leaves nothing.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a started child process.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // valid once done is closed
}

// Start runs path with args, appending its stdout and stderr to logPath under a header line.
func Start(name, path string, args []string, logPath string) (*Process, error) {
	return StartEnv(name, path, args, nil, logPath)
}

// StartEnv is Start with env ("KEY=value") added to this process's environment.
func StartEnv(name, path string, args, env []string, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// Temporary files go beside the log, into the directory the starter owns: a child killed
	// while it holds one (mount-utils probes umount on a fresh directory in TMPDIR as it
	// starts) leaves it there, not in the host's /tmp. env can still set another TMPDIR.
	tmp := filepath.Join(filepath.Dir(logPath), "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		logFile.Close()
		return nil, err
	}
	fmt.Fprintf(logFile, "\n==== %s starting %s at %s ====\n", name, path, time.Now().Format(time.RFC3339))
	cmd := exec.Command(path, args...)
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logFile, "==== %s exited (%s) at %s ====\n", name, ExitReason(p.err), time.Now().Format(time.RFC3339))
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process ID, also its process group ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit error; call it after Done.
func (p *Process) Err() error { return p.err }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) error {
	return p.signal(syscall.SIGTERM, grace)
}

// Kill sends SIGKILL to the process group, as a crash would, and waits for the exit.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	pgid := -p.PID()
	if !p.Exited() {
		_ = syscall.Kill(pgid, sig)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.PID())
			}
		}
	}
	// Anything the process forked shares its group; none of it may outlive it.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	return nil
}

// StopAll stops ps in reverse order, the last started first, each with Stop(grace).
func StopAll(grace time.Duration, ps ...*Process) error {
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		errs = append(errs, ps[i].Stop(grace))
	}
	return errors.Join(errs...)
}

// LogTail returns the last n lines of a log file, for error messages.
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// WaitReady polls ready every 100 ms until it succeeds, the process exits, or timeout passes.
// It is for start-up only, never a steady-state loop.
func WaitReady(ctx context.Context, p *Process, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited before it became ready (%v)", p.Err())
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %v", timeout, err)
		case <-tick.C:
		}
	}
}

// HTTPOK is a readiness probe for WaitReady: a GET of url answers 200 OK (a component's
// /healthz).
func HTTPOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// ExitReason names how a process ended, from the error of its Wait: "exit code N" or
// "signal SIGKILL".
func ExitReason(err error) string {
	var ee *exec.ExitError
	if err == nil {
		return "exit code 0"
	}
	if !errors.As(err, &ee) {
		return err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit code %d", ee.ExitCode())
}
