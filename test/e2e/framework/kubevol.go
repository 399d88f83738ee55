package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/localcluster"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// KubevolBinary builds cmd/kubevol once per test binary and returns its path.
func KubevolBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := localcluster.FindModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "kubevol-bin-")
		if err != nil {
			buildErr = err
			return
		}
		addProcessCleanup(func() { os.RemoveAll(dir) })
		binPath = filepath.Join(dir, "kubevol")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/kubevol")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/kubevol: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Process is a kubevol subcommand run by a test. It is killed when the test ends.
type Process struct {
	t       testing.TB
	args    []string
	LogPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartKubevol runs `kubevol <args...>` with its output in a log file in the test's temp dir.
func StartKubevol(t testing.TB, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, args: args, LogPath: filepath.Join(t.TempDir(), args[0]+".log")}
	p.Start()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("kubevol %s log (%s):\n%s", args[0], p.LogPath, localcluster.LogTail(p.LogPath, 40))
		}
	})
	addProcessCleanup(p.Kill)
	return p
}

// Start (re)starts the process; its log is appended to.
func (p *Process) Start() {
	p.t.Helper()
	bin := KubevolBinary(p.t)
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		p.t.Fatalf("start kubevol %v: %v", p.args, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// Kill sends SIGKILL, as a crash would, and waits for the exit.
func (p *Process) Kill() { p.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM and waits up to 30 s before SIGKILL.
func (p *Process) Stop() { p.signal(syscall.SIGTERM, 30*time.Second) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}
