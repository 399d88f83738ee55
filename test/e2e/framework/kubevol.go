package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/proc"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// BinaryEnv names a kubevol binary that hack/test.sh has just built from this source tree
// with the run's settings, for every package of the run instead of a link per package. Only
// hack/test.sh sets it (unlike KUBEVOL_BINARY, which a contributor may have exported for the
// embedding example, so that a stale binary is never tested). Unset, each test binary builds
// its own.
const BinaryEnv = "KUBEVOL_TEST_BINARY"

// KubevolBinary returns $KUBEVOL_TEST_BINARY, or builds cmd/kubevol once per test binary and
// returns its path.
func KubevolBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binPath = os.Getenv(BinaryEnv); binPath != "" {
			return
		}
		dir, err := os.MkdirTemp("", "kubevol-bin-")
		if err != nil {
			buildErr = err
			return
		}
		addProcessCleanup(func() { os.RemoveAll(dir) })
		binPath = filepath.Join(dir, "kubevol")
		buildErr = BuildKubevol(binPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// BuildKubevol puts a kubevol binary of this source tree at path: a symbolic link to
// $KUBEVOL_TEST_BINARY if set, else cmd/kubevol built with the environment's settings (under
// `make test`, CGO_ENABLED=0 and GOFLAGS=-trimpath: static and path-free as the shipped
// binary, from the build cache the test binaries filled).
func BuildKubevol(path string) error {
	if prebuilt := os.Getenv(BinaryEnv); prebuilt != "" {
		return os.Symlink(prebuilt, path)
	}
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", path, "./cmd/kubevol")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/kubevol: %v\n%s", err, out)
	}
	return nil
}

// Process is a kubevol subcommand run by a test. It is killed when the test ends, and it can
// be killed and started again to test crash recovery.
type Process struct {
	t       testing.TB
	args    []string
	LogPath string

	mu sync.Mutex
	p  *proc.Process
}

// StartKubevol runs `kubevol <args...>` with its output in a log file in the test's temp dir.
func StartKubevol(t testing.TB, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, args: args, LogPath: filepath.Join(t.TempDir(), args[0]+".log")}
	p.Start()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("kubevol %s log (%s):\n%s", args[0], p.LogPath, proc.LogTail(p.LogPath, 200))
		}
	})
	addProcessCleanup(p.Kill)
	return p
}

// Start (re)starts the process; its log is appended to.
func (p *Process) Start() {
	p.t.Helper()
	started, err := proc.Start("kubevol "+p.args[0], KubevolBinary(p.t), p.args, p.LogPath)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.p = started
	p.mu.Unlock()
}

func (p *Process) current() *proc.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p
}

// Kill sends SIGKILL, as a crash would, and waits for the exit.
func (p *Process) Kill() {
	if c := p.current(); c != nil {
		_ = c.Kill()
	}
}

// Stop sends SIGTERM and waits up to 30 s before SIGKILL.
func (p *Process) Stop() {
	if c := p.current(); c != nil {
		_ = c.Stop(30 * time.Second)
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	c := p.current()
	return c == nil || c.Exited()
}
