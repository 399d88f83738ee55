package drivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// childEnv carries the configuration of a driver child process.
const childEnv = "KUBEVOL_DRIVERTEST_CHILD"

type childSpec struct {
	Endpoint string        `json:"endpoint"`
	Config   driver.Config `json:"config"`
}

// RunChildIfRequested turns the test binary into a driver process when StartChild started
// it. Call it first thing in TestMain: it does not return in a child.
func RunChildIfRequested() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "drivertest child:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := driver.New(spec.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drivertest child:", err)
		os.Exit(1)
	}
	lis, err := driver.Listen(spec.Endpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drivertest child:", err)
		os.Exit(1)
	}
	if err := d.Run(ctx, lis); err != nil {
		fmt.Fprintln(os.Stderr, "drivertest child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Child is a driver running in a child process (the test binary itself), so that a test can
// kill it with SIGKILL at any moment, as a node crash or an OOM kill would.
type Child struct {
	Endpoint string
	Config   driver.Config
	Log      string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the process is waited for

	Conn       *grpc.ClientConn
	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient
}

// StartChild starts a driver process with cfg on endpoint and connects to it. The test
// binary must call RunChildIfRequested in TestMain. The process is killed at cleanup.
func StartChild(t TB, endpoint string, cfg driver.Config) *Child {
	t.Helper()
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	raw, err := json.Marshal(childSpec{Endpoint: endpoint, Config: cfg})
	if err != nil {
		t.Fatalf("%v", err)
	}
	p, err := driver.ParseEndpoint(endpoint)
	if err != nil {
		t.Fatalf("%v", err)
	}
	c := &Child{Endpoint: endpoint, Config: cfg, Log: filepath.Join(filepath.Dir(p), fmt.Sprintf("driver-%d.log", time.Now().UnixNano())), exited: make(chan struct{})}
	logf, err := os.Create(c.Log)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer logf.Close()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// A group of its own, so that Kill also ends the mount and mkfs the driver runs: a
	// container runtime kills a container's every process at once, and a child that
	// finished its mount after the restart's repairs would leave one no record explains.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start driver child: %v", err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.Kill() })
	in := &Instance{Endpoint: endpoint}
	if err := in.connect(); err != nil {
		c.Kill()
		log, _ := os.ReadFile(c.Log)
		t.Fatalf("driver child: %v\n%s", err, log)
	}
	c.Conn, c.Identity, c.Controller, c.Node = in.Conn, in.Identity, in.Controller, in.Node
	return c
}

// Kill sends SIGKILL to the driver's process group and waits for the driver to be gone.
// Mounts and loop devices stay, exactly as after a crash.
func (c *Child) Kill() {
	if c.Conn != nil {
		_ = c.Conn.Close()
		c.Conn = nil
	}
	select {
	case <-c.exited:
		return
	default:
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.exited
}
