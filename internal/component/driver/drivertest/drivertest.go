// Package drivertest starts the kubevol CSI driver for tests of this and other packages: in
// process (Start) or as a child process that a test can kill -9 (StartChild), with a CSI
// client connection, and a cleanup that leaves no mount and no loop device behind even when
// the test fails.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/backend"
)

// Instance is a running driver and a client for it.
type Instance struct {
	// Dir is the temporary root of the test: StateDir, the socket and scratch paths are
	// under it, and the cleanup releases every mount and loop device under it.
	Dir      string
	Endpoint string
	Config   driver.Config
	Driver   *driver.Driver
	Conn     *grpc.ClientConn

	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient

	stop func() error
}

// TB is the part of testing.TB the helpers use; Ginkgo's GinkgoT() satisfies it too.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// TempDir makes a directory under os.TempDir() whose mounts, loop devices and files are
// released when the test ends, pass or fail.
func TempDir(t TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(os.TempDir(), "kubevol-drivertest-")
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := removeDir(dir); err != nil {
			t.Errorf("%v", err)
		}
	})
	return dir
}

func removeDir(dir string) error {
	if err := Release(dir); err != nil {
		return fmt.Errorf("release %s: %w", dir, err)
	}
	return os.RemoveAll(dir)
}

// Start runs a driver in this process, stopped and cleaned up by t.Cleanup. See New.
func Start(t TB, cfg driver.Config) *Instance {
	t.Helper()
	in, err := New(cfg)
	if err != nil {
		t.Fatalf("start driver: %v", err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return in
}

// New runs a driver in this process, in a fresh directory under os.TempDir(), and connects
// to it. cfg.StateDir defaults to a directory inside it (give another instance's StateDir to
// split the controller and the node of one node across two drivers), cfg.NodeID to "node-1".
// Close releases everything.
func New(cfg driver.Config) (*Instance, error) {
	dir, err := os.MkdirTemp(os.TempDir(), "kubevol-drivertest-")
	if err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "state")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	in := &Instance{Dir: dir, Endpoint: "unix://" + filepath.Join(dir, "csi.sock"), Config: cfg}
	d, err := driver.New(in.Config)
	if err != nil {
		return nil, errors.Join(err, removeDir(dir))
	}
	lis, err := driver.Listen(in.Endpoint)
	if err != nil {
		return nil, errors.Join(err, removeDir(dir))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, lis) }()
	in.Driver = d
	in.stop = func() error {
		cancel()
		return <-done
	}
	if err := in.connect(); err != nil {
		return nil, errors.Join(err, in.Close())
	}
	return in, nil
}

// Close stops the driver, then releases and removes the instance's directory.
func (in *Instance) Close() error {
	err := in.Stop()
	return errors.Join(err, removeDir(in.Dir))
}

// Stop stops the driver and closes the connection, leaving mounts and state in place; it
// is safe to call twice.
func (in *Instance) Stop() error {
	if in.Conn != nil {
		_ = in.Conn.Close()
		in.Conn = nil
	}
	var err error
	if in.stop != nil {
		err = in.stop()
		in.stop = nil
	}
	return err
}

// connect dials the endpoint and waits until the driver answers Probe.
func (in *Instance) connect() error {
	conn, err := Dial(in.Endpoint)
	if err != nil {
		return err
	}
	in.Conn = conn
	in.Identity = csi.NewIdentityClient(conn)
	in.Controller = csi.NewControllerClient(conn)
	in.Node = csi.NewNodeClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		resp, err := in.Identity.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && resp.GetReady().GetValue() {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("driver at %s never became ready: %v", in.Endpoint, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Dial connects to a CSI unix endpoint.
func Dial(endpoint string) (*grpc.ClientConn, error) {
	p, err := driver.ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Path returns a path under the test directory, for staging and target paths.
func (in *Instance) Path(elem ...string) string {
	return filepath.Join(append([]string{in.Dir}, elem...)...)
}

// RequireRoot fails the test when not run as root. The driver's tests mount filesystems and
// attach loop devices; skipping them would hide that nothing was tested.
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the kubevol driver tests need root: they mount filesystems and attach loop devices")
	}
}

// Release unmounts and detaches everything held under dir: see backend.Release.
func Release(dir string) error { return backend.Release(dir) }

// Leftovers lists the mounts and loop devices still held under dir: see backend.Leftovers.
func Leftovers(dir string) ([]string, error) { return backend.Leftovers(dir) }
