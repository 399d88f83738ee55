package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/driver/backend"
	"github.com/kubevol/kubevol/internal/driver/state"
)

// Driver is one running instance of the kubevol CSI driver.
//
//	d, err := driver.New(driver.Config{NodeID: "n1", StateDir: dir})
//	lis, err := driver.Listen("unix:///run/kubevol/csi.sock")
//	err = d.Run(ctx, lis) // serves until ctx is cancelled
type Driver struct {
	cfg      Config
	log      klog.Logger
	ctrl     *controller
	node     *node
	metrics  *metrics
	calls    *callLog
	faults   *faults
	ready    atomic.Bool
	stopping chan struct{}
	stopOnce sync.Once
}

// New validates cfg, loads the state and reconciles it with the disk, the loop devices and
// the mount table. The driver is ready to Run when New returns.
func New(cfg Config) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	log = log.WithName("driver")
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, log: log, metrics: newMetrics(), faults: newFaults(cfg.Faults), stopping: make(chan struct{})}
	for _, r := range cfg.Faults {
		log.Info("FAULT INJECTION IS ON: this driver fails calls on purpose", "rule", r.String())
	}
	var err error
	if d.calls, err = openCallLog(cfg.CallLog); err != nil {
		return nil, err
	}
	locks, loops := newInflight(), &backend.Loops{}
	ctx := klog.NewContext(context.Background(), log)
	catalog := fileCatalog(filepath.Join(d.cfg.StateDir, "controller.json"))
	if d.cfg.servesController() {
		if d.ctrl, err = newController(&d.cfg, log, locks, loops); err != nil {
			return nil, d.closeWith(err)
		}
		if err := d.ctrl.reconcile(ctx); err != nil {
			return nil, d.closeWith(fmt.Errorf("reconcile controller state: %w", err))
		}
		catalog = d.ctrl.catalogVolume
		d.registerControllerGauges()
		d.metrics.commits("controller", d.ctrl.commits)
	}
	if d.cfg.servesNode() {
		if d.node, err = newNode(&d.cfg, log, locks, loops, catalog); err != nil {
			return nil, d.closeWith(err)
		}
		if err := d.node.reconcile(ctx); err != nil {
			return nil, d.closeWith(fmt.Errorf("reconcile node state: %w", err))
		}
		d.metrics.commits("node", d.node.commits)
	}
	d.ready.Store(true)
	log.Info("Driver ready", "name", cfg.DriverName, "version", cfg.Version, "nodeID", cfg.NodeID,
		"mode", cfg.Mode, "stateDir", cfg.StateDir, "attachRequired", cfg.AttachRequired)
	return d, nil
}

func (d *Driver) closeWith(err error) error {
	return errors.Join(err, d.calls.close())
}

func (d *Driver) registerControllerGauges() {
	count := func(f func(*state.Controller) int) func() float64 {
		return func() float64 {
			d.ctrl.mu.Lock()
			defer d.ctrl.mu.Unlock()
			return float64(f(d.ctrl.st))
		}
	}
	d.metrics.gauge("kubevol_driver_volumes", "Volumes created by the controller.", nil,
		count(func(s *state.Controller) int { return len(s.Volumes) }))
	d.metrics.gauge("kubevol_driver_snapshots", "Snapshots created by the controller.", nil,
		count(func(s *state.Controller) int { return len(s.Snapshots) }))
	for _, t := range []string{state.TypeDir, state.TypeBlock} {
		d.metrics.gauge("kubevol_driver_free_bytes", "Bytes a new volume may still use, by backend type.", map[string]string{"type": t},
			func() float64 {
				d.ctrl.mu.Lock()
				defer d.ctrl.mu.Unlock()
				free, _ := d.ctrl.freeBytesLocked(t)
				return float64(free)
			})
	}
}

// Server returns a gRPC server with the services of the configured mode registered. Run
// uses it; it is exported for tests that want to serve on a listener of their own.
func (d *Driver) Server() *grpc.Server {
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.intercept))
	csi.RegisterIdentityServer(srv, &identity{cfg: &d.cfg, ready: &d.ready})
	if d.ctrl != nil {
		csi.RegisterControllerServer(srv, d.ctrl)
	}
	if d.node != nil {
		csi.RegisterNodeServer(srv, d.node)
	}
	return srv
}

// Run serves CSI on lis until ctx is cancelled, then stops gracefully, waiting at most
// Config.ShutdownGrace for calls in flight. It closes lis and the call log.
func (d *Driver) Run(ctx context.Context, lis net.Listener) error {
	srv := d.Server()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	d.log.Info("Serving CSI", "address", lis.Addr().String())
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		d.log.Info("Stopping")
		d.stopOnce.Do(func() { close(d.stopping) })
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(d.cfg.ShutdownGrace):
			srv.Stop()
		}
		<-errc
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return errors.Join(err, d.calls.close())
}

// HTTPHandler serves /metrics (Prometheus) and /healthz (200 once the driver is ready).
func (d *Driver) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", d.metrics.handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// ParseEndpoint splits a CSI endpoint such as unix:///run/csi.sock into network and address.
// CSI ("Connectivity") allows unix sockets only; a bare path is taken as one.
func ParseEndpoint(ep string) (string, error) {
	p, ok := strings.CutPrefix(ep, "unix://")
	if !ok {
		if strings.Contains(ep, "://") {
			return "", fmt.Errorf("endpoint %q: only unix:// endpoints are supported", ep)
		}
		p = ep
	}
	if p == "" || !filepath.IsAbs(p) {
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path.sock", ep)
	}
	return p, nil
}

// Listen opens the unix socket of endpoint, removing a stale socket left by a killed driver.
func Listen(endpoint string) (net.Listener, error) {
	p, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("endpoint %s exists and is not a socket", p)
		}
		if err := os.Remove(p); err != nil {
			return nil, err
		}
	}
	return net.Listen("unix", p)
}

// fileCatalog reads the controller's records in a node-only process, which shares the state
// directory with the controller process of its node. The document is re-read when it
// changes; it is replaced atomically, so a read never sees half of it.
func fileCatalog(p string) func(id string) *state.Volume {
	var (
		mu    sync.Mutex
		mtime time.Time
		size  int64
		cache = state.NewController()
	)
	f := state.NewFile(p)
	return func(id string) *state.Volume {
		mu.Lock()
		defer mu.Unlock()
		if fi, err := os.Stat(p); err == nil && (!fi.ModTime().Equal(mtime) || fi.Size() != size) {
			fresh := state.NewController()
			if _, err := f.Load(fresh); err == nil {
				fresh.Normalize()
				cache, mtime, size = fresh, fi.ModTime(), fi.Size()
			}
		}
		if v, ok := cache.Volumes[id]; ok {
			return v.Clone()
		}
		return nil
	}
}
