// Package provisioner runs kubevol's CSI external provisioner: it connects to the driver,
// serves metrics and health, takes the leader lease, and runs the claim and volume
// controllers (and the capacity controller when enabled) on shared informers.
package provisioner

import (
	"context"
	"fmt"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csi"
	"github.com/kubevol/kubevol/internal/provisioner/capacity"
	"github.com/kubevol/kubevol/internal/provisioner/claim"
	"github.com/kubevol/kubevol/internal/provisioner/intent"
	"github.com/kubevol/kubevol/internal/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/provisioner/reclaim"
	"github.com/kubevol/kubevol/internal/sidecar"
)

// Config holds the provisioner's settings; the CLI fills it from upstream-named flags.
type Config struct {
	// Sidecar holds the flags every kubevol sidecar shares (CSI address, kubeconfig, timeout,
	// workers, retry intervals, client limits, leader election, HTTP endpoint).
	Sidecar sidecar.Options
	Master  string

	VolumeNamePrefix     string
	VolumeNameUUIDLength int

	StrictTopology              bool
	ImmediateTopology           bool
	ExtraCreateMetadata         bool
	DefaultFSType               string
	ControllerPublishReadOnly   bool
	PreventVolumeModeConversion bool

	Capacity capacity.Options
	// CapacityQPS and CapacityBurst throttle the separate client for CSIStorageCapacity writes.
	CapacityQPS   float32
	CapacityBurst int

	// IntentNamespace holds the intent journal ConfigMap.
	IntentNamespace string
}

// Run runs the provisioner until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	sc := cfg.Sidecar
	restCfg, err := restConfig(cfg)
	if err != nil {
		return err
	}
	clients, err := newClients(restCfg, cfg)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	conn, err := csi.Dial(csi.Config{Address: sc.CSIAddress, Timeout: sc.Timeout, Metrics: csi.NewMetrics(reg)})
	if err != nil {
		return err
	}
	defer conn.Close()

	logger.Info("Waiting for the CSI driver", "address", sc.CSIAddress)
	if err := conn.ProbeForever(ctx); err != nil {
		return err
	}
	driver, err := conn.DriverName(ctx)
	if err != nil {
		return err
	}
	caps, err := conn.Capabilities(ctx)
	if err != nil {
		return err
	}
	logger = logger.WithValues("driver", driver)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("CSI driver is ready", "topology", caps.Plugin[csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS])

	p := &instance{cfg: cfg, clients: clients, conn: conn, caps: caps, driver: driver,
		identity: fmt.Sprintf("%d-%d-%s", time.Now().UnixMilli(), rand.IntN(10000), driver),
		journal:  intent.New(clients.main, cfg.IntentNamespace, "kubevol-provisioner-"+objectName(driver)),
	}
	p.hostname, _ = os.Hostname()
	p.metrics = metrics.New(reg, func() float64 { return float64(p.journal.Len()) })
	return sidecar.Run(ctx, sc, clients.leader, reg, objectName(driver), p.lead)
}

// instance is one provisioner connected to its driver, ready to lead.
type instance struct {
	cfg      Config
	clients  *clientSet
	conn     *csi.Conn
	caps     *csi.Capabilities
	driver   string
	identity string
	hostname string
	journal  *intent.Journal
	metrics  *metrics.Metrics
}

// restConfig honours --master, which only the provisioner among the sidecars has upstream.
func restConfig(cfg Config) (*rest.Config, error) {
	if cfg.Master == "" {
		return cfg.Sidecar.RESTConfig()
	}
	c, err := clientcmd.BuildConfigFromFlags(cfg.Master, cfg.Sidecar.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	return c, nil
}

type clientSet struct {
	main, events, leader, capacity kubernetes.Interface
	snapshots                      snapclient.Interface
}

func newClients(restCfg *rest.Config, cfg Config) (*clientSet, error) {
	withLimits := func(qps float32, burst int) *rest.Config {
		c := rest.CopyConfig(restCfg)
		c.QPS, c.Burst = qps, burst
		c.UserAgent = "kubevol-provisioner"
		// Compression costs CPU on both ends and saves nothing on the loopback or in-cluster
		// network a provisioner talks over.
		c.DisableCompression = true
		sidecar.UseProtobuf(c) // --master configs do not come from sidecar.RESTConfig
		return c
	}
	var cs clientSet
	var err error
	qps, burst := cfg.Sidecar.KubeAPIQPS, cfg.Sidecar.KubeAPIBurst
	if cs.main, err = kubernetes.NewForConfig(withLimits(qps, burst)); err != nil {
		return nil, err
	}
	// Events get their own client and budget so an event storm never delays a PV create
	// (upstream shares one client between the two).
	if cs.events, err = kubernetes.NewForConfig(withLimits(qps, burst)); err != nil {
		return nil, err
	}
	if cs.leader, err = kubernetes.NewForConfig(withLimits(qps, burst)); err != nil {
		return nil, err
	}
	if cs.capacity, err = kubernetes.NewForConfig(withLimits(cfg.CapacityQPS, cfg.CapacityBurst)); err != nil {
		return nil, err
	}
	// VolumeSnapshots are CRDs, served only as JSON.
	snapCfg := withLimits(qps, burst)
	snapCfg.ContentType, snapCfg.AcceptContentTypes = "application/json", "application/json"
	if cs.snapshots, err = snapclient.NewForConfig(snapCfg); err != nil {
		return nil, err
	}
	return &cs, nil
}

// lead runs the controllers while this instance holds the lease.
func (p *instance) lead(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	cfg, cs, conn, caps, driver, journal, m := p.cfg, p.clients, p.conn, p.caps, p.driver, p.journal, p.metrics
	records, err := journal.Load(ctx)
	if err != nil {
		return err
	}
	go journal.Run(ctx)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.events.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: driver + "_" + p.hostname})

	factory := informers.NewSharedInformerFactoryWithOptions(cs.main, 15*time.Minute, informers.WithTransform(cacheTransform(driver)))
	topo := caps.Plugin[csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS]
	ccfg := claim.Config{
		Client: cs.main, Recorder: recorder, CSI: conn, Caps: caps, Driver: driver, Identity: p.identity,
		Journal: journal, Metrics: m, Snapshots: cs.snapshots,
		Claims: factory.Core().V1().PersistentVolumeClaims(), Volumes: factory.Core().V1().PersistentVolumes(),
		Classes:          factory.Storage().V1().StorageClasses(),
		VolumeNamePrefix: cfg.VolumeNamePrefix, VolumeNameUUIDLength: cfg.VolumeNameUUIDLength,
		DefaultFSType: cfg.DefaultFSType, ExtraCreateMetadata: cfg.ExtraCreateMetadata,
		StrictTopology: cfg.StrictTopology, ImmediateTopology: cfg.ImmediateTopology,
		ControllerPublishReadOnly: cfg.ControllerPublishReadOnly, PreventVolumeModeConversion: cfg.PreventVolumeModeConversion,
		RetryIntervalStart: cfg.Sidecar.RetryIntervalStart, RetryIntervalMax: cfg.Sidecar.RetryIntervalMax,
	}
	if topo {
		ccfg.Nodes, ccfg.CSINodes = factory.Core().V1().Nodes(), factory.Storage().V1().CSINodes()
	}
	claims, err := claim.New(ccfg)
	if err != nil {
		return err
	}
	rcfg := reclaim.Config{
		Client: cs.main, Recorder: recorder, CSI: conn, Driver: driver, Metrics: m,
		Volumes:            factory.Core().V1().PersistentVolumes(),
		RetryIntervalStart: cfg.Sidecar.RetryIntervalStart, RetryIntervalMax: cfg.Sidecar.RetryIntervalMax,
	}
	if caps.Controller[csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME] {
		rcfg.Attachments = factory.Storage().V1().VolumeAttachments()
	}
	volumes, err := reclaim.New(rcfg)
	if err != nil {
		return err
	}
	var capCtl *capacity.Controller
	if cfg.Capacity.Enabled {
		if capCtl, err = capacity.New(capacity.Config{
			Client: cs.capacity, CSI: conn, Driver: driver, Options: cfg.Capacity, Topology: topo,
			Classes: factory.Storage().V1().StorageClasses(), Nodes: factory.Core().V1().Nodes(), CSINodes: factory.Storage().V1().CSINodes(),
			QueueMetrics: m.Queue, RetryIntervalStart: cfg.Sidecar.RetryIntervalStart, RetryIntervalMax: cfg.Sidecar.RetryIntervalMax,
		}); err != nil {
			return err
		}
	}

	// Leftovers from an earlier run: each is either finished (a PV exists), resumed (its
	// claim still waits) or cleaned up (its claim is gone).
	for _, r := range records {
		claims.Enqueue(r.ClaimUID)
	}
	if len(records) > 0 {
		logger.Info("Resuming in-flight provisions from the intent journal", "count", len(records))
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go claims.Run(ctx, cfg.Sidecar.WorkerThreads)
	go volumes.Run(ctx, cfg.Sidecar.WorkerThreads)
	if capCtl != nil {
		go capCtl.Run(ctx)
	}
	<-ctx.Done()
	return nil
}

// objectName is the driver's name as an object name: the Lease (as upstream names it) and
// the intent journal.
func objectName(driver string) string { return strings.ToLower(csi.SanitizeDriverName(driver)) }
