package framework

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// ControllerDriver is a `kubevol driver --mode controller` process, what the controller-side
// sidecars (provisioner, resizer) talk to, and a CSI connection to it for the test's own
// calls.
type ControllerDriver struct {
	*Process
	// Endpoint is the unix:// address of its socket, for the sidecars' --csi-address.
	Endpoint string
	Conn     *csiclient.Conn
}

// StartControllerDriver starts the driver named name for node nodeID with its socket and
// its state under dir, plus extraArgs, and waits up to a minute until it answers Probe
// ready. dir must be short (a unix socket path has at most 108 bytes) and must outlive the
// process: create it before, so that its cleanup runs after the process is stopped.
func StartControllerDriver(ctx context.Context, t testing.TB, dir, name, nodeID string, extraArgs ...string) *ControllerDriver {
	t.Helper()
	d := &ControllerDriver{Endpoint: "unix://" + filepath.Join(dir, "csi.sock")}
	args := append([]string{"driver", "--endpoint", d.Endpoint, "--node-id", nodeID, "--state-dir", filepath.Join(dir, "state"),
		"--mode", "controller", "--drivername", name}, extraArgs...)
	d.Process = StartKubevol(t, args...)
	conn, err := csiclient.Dial(csiclient.Config{Address: d.Endpoint, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d.Conn = conn
	t.Cleanup(func() { conn.Close() })
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := conn.ProbeForever(pctx); err != nil {
		t.Fatalf("driver did not become ready: %v", err)
	}
	return d
}

// FreeAddr is a loopback host:port that was free a moment ago, for a process's HTTP
// endpoint.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
