// Package nodeagent is kubevol's node agent. It registers its Node (heartbeat Lease, Ready
// condition, capacity, controller-managed attach/detach), serves /metrics and /healthz,
// reports disk-backed emptyDirs over their sizeLimit, and assembles the public pieces a
// node needs: the volume manager (pkg/volumemanager) with the in-tree and CSI plugins, the
// CSI driver registry fed by plugins_registry (pkg/csidrivers), node.status.volumesInUse
// (pkg/volumesinuse), and the pods' condition and deletion (pkg/podstatus).
//
// It runs no containers. A pod's phase is left as the API server set it (Pending): the
// agent never claims containers run. Readiness of a pod's volumes is the pod condition
// kubevol.io/VolumesReady.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/pkg/csidrivers"
	"github.com/kubevol/kubevol/pkg/podstatus"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volumemanager"
	"github.com/kubevol/kubevol/pkg/volumesinuse"
	"github.com/kubevol/kubevol/pkg/volumestats"
)

// Config configures an Agent. Client, NodeName and RootDir are required.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// RootDir holds pods/<uid>/volumes/...; /var/lib/kubelet gives the kubelet's paths.
	RootDir string
	// MetricsAddress serves /metrics and /healthz; empty disables the server.
	MetricsAddress string
	// Mounter defaults to volume.NewMounter().
	Mounter mount.Interface
	// Labels are added to the Node object.
	Labels map[string]string
	// Taints are set when the agent creates its Node (the kubelet's --register-with-taints);
	// an existing Node without them gets a warning, as a node may not change its taints.
	Taints []v1.Taint
	// Collectors are registered with the agent's /metrics (e.g. the certificate TTL).
	Collectors []prometheus.Collector
	// LeaseDuration is the Node lease's duration; it is renewed every quarter of it.
	LeaseDuration time.Duration
	// StatusInterval is how often the Node status is refreshed when nothing changes.
	StatusInterval time.Duration
	// ResyncPeriod is the volume manager's safety-net resync.
	ResyncPeriod time.Duration
	// SizeLimitInterval is how often disk-backed emptyDirs with a sizeLimit are measured;
	// default 30 s.
	SizeLimitInterval time.Duration
	// SyncFrequency is how often volumes of CSI drivers with requiresRepublish are published
	// again, and the claims of running pods read again (the kubelet's --sync-frequency);
	// default one minute.
	SyncFrequency time.Duration
	// SELinuxEnabled says whether the host runs SELinux; nil detects it
	// (volumemanager.Config.SELinuxEnabled).
	SELinuxEnabled *bool
	// OnVolumesReady, if set, is called when all volumes of a pod are mounted (benchmarks).
	OnVolumesReady func(pod *v1.Pod, at time.Time)
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	manager  *volumemanager.Manager
	registry *prometheus.Registry
	recorder record.EventRecorder
	// startEvents starts writing the recorder's events; Run calls it.
	startEvents func(kubernetes.Interface) func()
	pods        *podstatus.Writer
	drivers     *csidrivers.Registry
	inUse       *volumesinuse.Reporter
	// informers holds the CSIDriver cache of the CSI plugin.
	informers informers.SharedInformerFactory
	healthy   atomic.Bool

	mu         sync.Mutex
	capacity   v1.ResourceList
	listener   net.Listener
	readySince metav1.Time
	runCtx     context.Context
}

// New validates cfg and builds the agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("node: Config.Client is required")
	case cfg.NodeName == "":
		return nil, errors.New("node: Config.NodeName is required")
	case cfg.RootDir == "":
		return nil, errors.New("node: Config.RootDir is required")
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Minute
	}
	if cfg.SizeLimitInterval <= 0 {
		cfg.SizeLimitInterval = 30 * time.Second
	}
	inUse, err := volumesinuse.New(volumesinuse.Config{Client: cfg.Client, NodeName: cfg.NodeName, Interval: cfg.StatusInterval})
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, registry: prometheus.NewRegistry(), inUse: inUse}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.registry.MustRegister(cfg.Collectors...)
	a.recorder, a.startEvents = controller.NewDeferredEventRecorder(v1.EventSource{Component: "kubevol-node", Host: cfg.NodeName})
	a.capacity = machineCapacity(cfg.RootDir)
	a.pods = podstatus.New(cfg.Client)
	a.drivers = csidrivers.New(cfg.Client, cfg.NodeName)
	a.informers = informers.NewSharedInformerFactory(cfg.Client, 0)
	csiPlugin := csiplugin.New(csiplugin.Config{
		Drivers: a.drivers, CSIDrivers: a.informers.Storage().V1().CSIDrivers().Lister(), RepublishPeriod: cfg.SyncFrequency,
	})
	var observer volumemanager.Observer = a.pods
	if cfg.OnVolumesReady != nil {
		observer = readyHook{Writer: a.pods, onReady: cfg.OnVolumesReady}
	}
	m, err := volumemanager.New(volumemanager.Config{
		Client:              cfg.Client,
		NodeName:            cfg.NodeName,
		Paths:               volume.Paths{Root: cfg.RootDir},
		Plugins:             append(plugins.All(), csiPlugin),
		Mounter:             cfg.Mounter,
		Recorder:            a.recorder,
		Registerer:          a.registry,
		Observer:            observer,
		NodeAllocatable:     a.allocatable,
		ResyncPeriod:        cfg.ResyncPeriod,
		ClaimSyncPeriod:     cfg.SyncFrequency,
		VolumesInUseChanged: a.inUse.Notify,
		SELinuxEnabled:      cfg.SELinuxEnabled,
	})
	if err != nil {
		return nil, err
	}
	a.manager = m
	a.registry.MustRegister(volumestats.NewCollector(m, a.drivers, volume.Paths{Root: cfg.RootDir}, a.runContext))
	return a, nil
}

// Manager is the agent's volume manager.
func (a *Agent) Manager() *volumemanager.Manager { return a.manager }

// MetricsAddr is the address the metrics server listens on, once Run has started it.
func (a *Agent) MetricsAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listener == nil {
		return ""
	}
	return a.listener.Addr().String()
}

// runContext is Run's context, for work done on behalf of scrapes.
func (a *Agent) runContext() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runCtx == nil {
		return context.Background()
	}
	return a.runCtx
}

func (a *Agent) allocatable() v1.ResourceList {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capacity
}

// Run registers the node and runs everything until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	a.mu.Lock()
	a.runCtx = ctx
	a.mu.Unlock()
	defer a.startEvents(a.cfg.Client)()

	if a.cfg.MetricsAddress != "" {
		if err := a.serve(ctx); err != nil {
			return err
		}
	}
	if err := a.registerNode(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
	}
	logger.Info("Node registered", "rootDir", a.cfg.RootDir)
	if err := a.drivers.InitializeCSINode(ctx); err != nil {
		// Each driver's registration writes the CSINode again, annotation included.
		logger.Error(err, "Cannot initialize the CSINode yet; the next driver registration writes it")
	}
	a.informers.Start(ctx.Done())
	defer a.informers.Shutdown()
	a.informers.WaitForCacheSync(ctx.Done())

	var wg sync.WaitGroup
	errCh := make(chan error, 1)
	wg.Add(7)
	go func() {
		defer wg.Done()
		a.drivers.RunAllocatableUpdates(ctx, a.informers.Storage().V1().CSIDrivers().Lister())
	}()
	go func() {
		defer wg.Done()
		// The kubelet's plugin manager: drivers register through sockets in this directory.
		if err := a.drivers.Watch(ctx, volume.Paths{Root: a.cfg.RootDir}.PluginRegistryDir()); err != nil {
			logger.Error(err, "Plugin registration watcher failed; no CSI driver can register")
		}
	}()
	go func() { defer wg.Done(); a.runLease(ctx) }()
	go func() { defer wg.Done(); a.runEmptyDirLimits(ctx, a.cfg.SizeLimitInterval) }()
	go func() { defer wg.Done(); a.pods.Run(ctx) }()
	go func() { defer wg.Done(); a.inUse.Run(ctx, a.manager) }()
	go func() {
		defer wg.Done()
		if err := a.manager.Run(ctx); err != nil {
			errCh <- err
		}
	}()
	go func() {
		select {
		case <-a.manager.Initialized():
			a.healthy.Store(true)
		case <-ctx.Done():
		}
	}()
	a.runNodeStatus(ctx)
	wg.Wait()
	select {
	case err := <-errCh:
		return err
	default:
	}
	logger.Info("Node agent stopped")
	return nil
}

// readyHook tells OnVolumesReady (the benchmarks) when a pod's volumes are ready.
type readyHook struct {
	*podstatus.Writer
	onReady func(*v1.Pod, time.Time)
}

func (h readyHook) VolumesReady(pod *v1.Pod) {
	h.onReady(pod, time.Now())
	h.Writer.VolumesReady(pod)
}

func (a *Agent) serve(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.healthy.Load() {
			http.Error(w, "volume manager not initialized", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	l, err := net.Listen("tcp", a.cfg.MetricsAddress)
	if err != nil {
		return fmt.Errorf("metrics server: %w", err)
	}
	a.mu.Lock()
	a.listener = l
	a.mu.Unlock()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return nil
}
