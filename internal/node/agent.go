// Package node is kubevol's node agent: it registers its Node (heartbeat Lease, Ready
// condition, capacity, controller-managed attach/detach), runs the volume manager for the
// pods bound to the node, reports per-pod volume readiness (events and the
// kubevol.io/VolumesReady condition), keeps node.status.volumesInUse current, and completes
// the deletion of pods once their volumes are torn down, as the kubelet does.
//
// It runs no containers. A pod's phase is left as the API server set it (Pending): the
// agent never claims containers run. Readiness of a pod's volumes is the pod condition
// kubevol.io/VolumesReady.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/registration"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volumemanager"
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
	// OnVolumesReady, if set, is called when all volumes of a pod are mounted (benchmarks).
	OnVolumesReady func(pod *v1.Pod, at time.Time)
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	manager  *volumemanager.Manager
	registry *prometheus.Registry
	recorder record.EventRecorder
	bcast    record.EventBroadcaster
	pods     *podStatusWriter
	drivers  *csiDrivers
	// informers holds the CSIDriver cache of the CSI plugin.
	informers         informers.SharedInformerFactory
	csiDriverInformer storageinformers.CSIDriverInformer
	inUse             chan struct{}
	healthy           atomic.Bool

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
	a := &Agent{cfg: cfg, registry: prometheus.NewRegistry(), inUse: make(chan struct{}, 1)}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.bcast = record.NewBroadcaster()
	a.recorder = a.bcast.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubevol-node", Host: cfg.NodeName})
	a.capacity = machineCapacity(cfg.RootDir)
	a.pods = newPodStatusWriter(cfg.Client, cfg.OnVolumesReady)
	a.drivers = newCSIDrivers(cfg.Client, cfg.NodeName)
	a.informers = informers.NewSharedInformerFactory(cfg.Client, 0)
	a.csiDriverInformer = a.informers.Storage().V1().CSIDrivers()
	csiPlugin := csiplugin.New(csiplugin.Config{
		Drivers: a.drivers, CSIDrivers: a.csiDriverInformer.Lister(), RepublishPeriod: cfg.SyncFrequency,
	})
	m, err := volumemanager.New(volumemanager.Config{
		Client:          cfg.Client,
		NodeName:        cfg.NodeName,
		Paths:           volume.Paths{Root: cfg.RootDir},
		Plugins:         append(plugins.All(), csiPlugin),
		Mounter:         cfg.Mounter,
		Recorder:        a.recorder,
		Registerer:      a.registry,
		Observer:        a.pods,
		NodeAllocatable: a.allocatable,
		ResyncPeriod:    cfg.ResyncPeriod,
		ClaimSyncPeriod: cfg.SyncFrequency,
		VolumesInUseChanged: func() {
			select {
			case a.inUse <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return nil, err
	}
	a.manager = m
	a.registry.MustRegister(&volumeStats{manager: m, drivers: a.drivers, paths: volume.Paths{Root: cfg.RootDir}, ctx: a.runContext})
	return a, nil
}

// Manager is the agent's volume manager.
func (a *Agent) Manager() *volumemanager.Manager { return a.manager }

// PluginRegistryDir is <root-dir>/plugins_registry, where CSI drivers' registrars
// (node-driver-registrar, `kubevol driver --plugin-registration-dir`) put their sockets.
func (a *Agent) PluginRegistryDir() string { return filepath.Join(a.cfg.RootDir, "plugins_registry") }

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
	a.bcast.StartStructuredLogging(4)
	a.bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.cfg.Client.CoreV1().Events("")})
	defer a.bcast.Shutdown()

	if a.cfg.MetricsAddress != "" {
		if err := a.serve(ctx); err != nil {
			return err
		}
	}
	if err := a.registerNode(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
	}
	logger.Info("Node registered", "rootDir", a.cfg.RootDir)
	a.informers.Start(ctx.Done())
	defer a.informers.Shutdown()
	a.informers.WaitForCacheSync(ctx.Done())

	var wg sync.WaitGroup
	errCh := make(chan error, 1)
	wg.Add(5)
	defer a.drivers.closeAll()
	go func() {
		defer wg.Done()
		// The kubelet's plugin manager: drivers register through sockets in this directory.
		w := &registration.Watcher{Dir: a.PluginRegistryDir(), Handler: a.drivers}
		if err := w.Run(ctx); err != nil {
			logger.Error(err, "Plugin registration watcher failed; no CSI driver can register")
		}
	}()
	go func() { defer wg.Done(); a.runLease(ctx) }()
	go func() { defer wg.Done(); a.runEmptyDirLimits(ctx, a.cfg.SizeLimitInterval) }()
	go func() { defer wg.Done(); a.pods.run(ctx) }()
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
