package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is one control-plane component running as a child process in its own process
// group. The kernel kills it (Pdeathsig) if the process that started it dies, so a crashed
// or killed test leaves nothing behind.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error // valid once done is closed
}

func startProcess(binary, name string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "\n==== %s starting %s at %s ====\n", name, binary, time.Now().Format(time.RFC3339))
	cmd := exec.Command(binary, append([]string{name}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the exit.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	pgid := -p.pid()
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid())
		}
	}
	// Anything the component forked shares its group; make sure none of it outlives it.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	return nil
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

// errExited reports a component that died before it became ready.
var errExited = errors.New("exited before it became ready")
