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

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
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
	if cfg.Recover != RecoverNone {
		log.Info("--recover is set: it only acts on a state directory the driver would refuse; remove it once the driver has started",
			"recover", cfg.Recover)
	}
	cu, err := claimStateDir(&d.cfg, log)
	if err != nil {
		return nil, d.closeWith(err)
	}
	locks, loops := newInflight(), &backend.Loops{}
	ctx := klog.NewContext(context.Background(), log)
	p := &pool{capacity: cfg.Capacity, fsPath: cfg.StateDir}
	// In a split deployment the other process's records are read from its file.
	ctrlDoc := newFileView(filepath.Join(d.cfg.ControllerStateDir, "controller.json"), state.NewController)
	nodeDoc := newFileView(filepath.Join(d.cfg.StateDir, "node.json"), state.NewNode)
	catalog := func(id string) *state.Volume {
		if v, ok := ctrlDoc.get().Volumes[id]; ok && !v.Creating {
			return v.Clone()
		}
		return nil
	}
	ctrlHolds := func(typ string) []hold {
		return controllerHolds(ctrlDoc.get(), controllerLayout(d.cfg.ControllerStateDir), typ)
	}
	if d.cfg.servesController() {
		if d.ctrl, err = newController(&d.cfg, log, locks, loops, p, cu); err != nil {
			return nil, d.closeWith(err)
		}
		catalog, ctrlHolds = d.ctrl.catalogVolume, d.ctrl.holds
		d.ctrl.peer = func(typ string) []hold {
			return ephemeralHolds(nodeDoc.get(), ephemeralLayout(d.cfg.StateDir), typ, "")
		}
	}
	if d.cfg.servesNode() {
		if d.node, err = newNode(&d.cfg, log, locks, loops, catalog, p, cu); err != nil {
			return nil, d.closeWith(err)
		}
		d.node.peer = ctrlHolds
		if d.ctrl != nil {
			d.ctrl.peer = d.node.holds
			if d.cfg.off[WithoutControllerExpansion] {
				d.node.grow = d.ctrl.expand
			}
			d.ctrl.modified = d.node.applyMutable
		} else {
			// Split: the controller's modifications reach this process through its record.
			d.node.controllerVolumes = func() map[string]*state.Volume { return ctrlDoc.get().Volumes }
		}
	}
	// Start-up repairs run once both sides are known, so that each sees the other's holds.
	if d.ctrl != nil {
		if err := d.ctrl.reconcile(ctx); err != nil {
			return nil, d.closeWith(fmt.Errorf("reconcile controller state: %w", err))
		}
		d.registerControllerGauges()
		d.metrics.commits("controller", d.ctrl.commits)
	}
	if d.node != nil {
		if err := d.node.reconcile(ctx); err != nil {
			return nil, d.closeWith(fmt.Errorf("reconcile node state: %w", err))
		}
		d.metrics.commits("node", d.node.commits)
	}
	if err := d.measureQuarantine(p); err != nil {
		return nil, d.closeWith(err)
	}
	d.ready.Store(true)
	log.Info("Driver ready", "name", cfg.DriverName, "version", cfg.Version, "nodeID", cfg.NodeID,
		"mode", cfg.Mode, "stateDir", cfg.StateDir, "attachRequired", cfg.AttachRequired, "without", d.cfg.off.String())
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
				free, _ := d.ctrl.freeBytesLocked(t) // mu, then the node's: the usual order
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
		if !d.cfg.off[WithoutGroupSnapshots] {
			csi.RegisterGroupControllerServer(srv, &groupController{c: d.ctrl})
		}
	}
	if d.node != nil {
		csi.RegisterNodeServer(srv, d.node)
	}
	return srv
}

// Run serves CSI on lis (and on more, the same services on further sockets) until ctx is
// cancelled, then stops gracefully, waiting at most Config.ShutdownGrace for calls in
// flight. It closes the listeners and the call log.
func (d *Driver) Run(ctx context.Context, lis net.Listener, more ...net.Listener) error {
	srv := d.Server()
	if d.node != nil && d.node.controllerVolumes != nil {
		follow, stop := context.WithCancel(klog.NewContext(ctx, d.log))
		defer stop()
		go d.node.followModifications(follow)
	}
	all := append([]net.Listener{lis}, more...)
	errc := make(chan error, len(all))
	for _, l := range all {
		go func() { errc <- srv.Serve(l) }()
		d.log.Info("Serving CSI", "address", l.Addr().String())
	}
	var err error
	select {
	case err = <-errc:
		// One listener failed: the others stop with it.
		srv.Stop()
		for range all[1:] {
			<-errc
		}
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
		for range all {
			<-errc
		}
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
// The socket is made readable and writable by its group (0660): the sidecars run as a
// non-root user (65532 in deploy/) whose group is the driver's (runAsGroup), so they can
// connect while other users on the node cannot; hostpath runs its sidecars privileged instead.
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
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("endpoint %s: %w", p, err)
	}
	return l, nil
}

// fileView reads a record document that the other process of a split node writes. It is
// read again only when it changed; it is replaced atomically, so a read never sees half of
// it, and an unreadable or missing file reads as the last good copy (empty at first).
type fileView[T any] struct {
	mu    sync.Mutex
	path  string
	file  *state.File
	fresh func() *T
	mtime time.Time
	size  int64
	doc   *T
}

func newFileView[T any](p string, fresh func() *T) *fileView[T] {
	return &fileView[T]{path: p, file: state.NewFile(p), fresh: fresh, doc: fresh()}
}

// get returns the document; the caller must not change it.
func (v *fileView[T]) get() *T {
	v.mu.Lock()
	defer v.mu.Unlock()
	if fi, err := os.Stat(v.path); err == nil && (!fi.ModTime().Equal(v.mtime) || fi.Size() != v.size) {
		doc := v.fresh()
		if _, err := v.file.Load(doc); err == nil {
			v.doc, v.mtime, v.size = doc, fi.ModTime(), fi.Size()
		}
	}
	return v.doc
}

// measureQuarantine counts what the quarantine holds into the pool and reports it: an
// operator must look at it, and until then it takes space like any volume.
func (d *Driver) measureQuarantine(p *pool) error {
	bytes, entries, err := quarantineUsage(d.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("measure the quarantine: %w", err)
	}
	p.quarantined.Store(bytes)
	p.quarantinedEntries.Store(entries)
	if entries > 0 {
		d.log.Info("The quarantine holds data that no record names; inspect it and delete it by hand",
			"path", quarantineDir(d.cfg.StateDir), "entries", entries, "bytes", bytes)
	}
	d.metrics.gauge("kubevol_driver_quarantined_entries", "Volumes and snapshots moved to the quarantine because no record named them, as measured at start-up.", nil,
		func() float64 { return float64(p.quarantinedEntries.Load()) })
	d.metrics.gauge("kubevol_driver_quarantined_bytes", "Bytes held by the quarantine, counted against the pool, as measured at start-up.", nil,
		func() float64 { return float64(p.quarantined.Load()) })
	return nil
}
