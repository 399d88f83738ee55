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

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/provisioner/capacity"
	"github.com/kubevol/kubevol/internal/component/provisioner/claim"
	"github.com/kubevol/kubevol/internal/component/provisioner/intent"
	"github.com/kubevol/kubevol/internal/component/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/component/provisioner/reclaim"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Config holds the provisioner's settings; the CLI fills it from upstream-named flags.
type Config struct {
	// Sidecar holds the flags every kubevol sidecar shares (CSI address, kubeconfig, master,
	// timeout, workers, retry intervals, resync, client limits, leader election, HTTP).
	Sidecar sidecar.Options
	// Options configure the claim controller (volume names, topology, create parameters).
	claim.Options

	Capacity capacity.Options
	// CapacityQPS and CapacityBurst throttle the separate client for CSIStorageCapacity writes.
	CapacityQPS   float32
	CapacityBurst int

	// IntentNamespace holds the provisioning journal's Leases (intent package).
	IntentNamespace string

	// NodeDeployment is set by --node-deployment: this instance serves one node. Run fills
	// its Topology from the driver's NodeGetInfo.
	NodeDeployment *claim.NodeDeployment
}

// Run runs the provisioner until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	sc, err := sidecar.Connect(ctx, "provisioner", &cfg.Sidecar)
	if err != nil {
		return err
	}
	defer sc.Close()
	caps, err := sc.CSI.Capabilities(ctx)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("driver", sc.Driver)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("CSI driver is ready", "topology", caps.Plugin[csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS])
	served, err := checkAPIs(ctx, sc, cfg, caps)
	if err != nil {
		return err
	}
	cfg.Capacity.Enabled = cfg.Capacity.Enabled && served.On(capacityFeature)

	identity := fmt.Sprintf("%d-%d-%s", time.Now().UnixMilli(), rand.IntN(10000), sc.Driver)
	node := ""
	if nd := cfg.NodeDeployment; nd != nil {
		if err := nodeInfo(ctx, sc, nd); err != nil {
			return err
		}
		identity += "-" + nd.NodeName
		node = nd.NodeName
		logger.Info("Node deployment: provisioning only this node's claims", "node", nd.NodeName, "topology", nd.Topology, "immediateBinding", nd.ImmediateBinding)
	}
	p := &instance{cfg: cfg, sc: sc, caps: caps, identity: identity, noClasses: !served.On(classesFeature),
		journal: intent.New(sc.Client, cfg.IntentNamespace, sc.Driver, node),
	}
	p.hostname, _ = os.Hostname()
	// Events get their own client and budget so an event storm never delays a PV create
	// (upstream shares one client between the two).
	if p.events, err = sc.NewClient(cfg.Sidecar.KubeAPIQPS, cfg.Sidecar.KubeAPIBurst); err != nil {
		return err
	}
	if p.capacity, err = sc.NewClient(cfg.CapacityQPS, cfg.CapacityBurst); err != nil {
		return err
	}
	// VolumeSnapshots are CRDs, served only as JSON.
	snapCfg := rest.CopyConfig(sc.RESTConfig)
	snapCfg.ContentType, snapCfg.AcceptContentTypes = "application/json", "application/json"
	if p.snapshots, err = snapclient.NewForConfig(snapCfg); err != nil {
		return err
	}
	p.metrics = metrics.New(sc.Registry, func() float64 { return float64(p.journal.Len()) })
	return sc.Run(ctx, objectName(sc.Driver), p.lead)
}

// instance is one provisioner connected to its driver, ready to lead.
type instance struct {
	cfg              Config
	sc               *sidecar.Sidecar
	events, capacity kubernetes.Interface
	snapshots        snapclient.Interface
	caps             *csiclient.Capabilities
	identity         string
	hostname         string
	journal          *intent.Journal
	metrics          *metrics.Metrics
	noClasses        bool
}

// lead runs the controllers while this instance holds the lease.
func (p *instance) lead(ctx context.Context) error {
	cfg, sc, caps, driver, m := p.cfg, p.sc, p.caps, p.sc.Driver, p.metrics
	records, err := p.journal.Load(ctx)
	if err != nil {
		return err
	}

	recorder, stopEvents := controller.NewEventRecorder(ctx, p.events, driver+"_"+p.hostname)
	defer stopEvents()
	factory := informers.NewSharedInformerFactoryWithOptions(sc.Client, cfg.Sidecar.Resync, informers.WithTransform(cacheTransform(driver)))
	r := controller.NewRunner("provisioner")
	r.AddSource(controller.Informers(factory))
	cc := sc.ControllerConfig()

	topo := caps.Plugin[csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS]
	ccfg := claim.Config{
		ControllerConfig: cc, Options: cfg.Options, Recorder: recorder, Caps: caps, Identity: p.identity,
		Journal: p.journal, Metrics: m, Snapshots: p.snapshots,
		Claims: factory.Core().V1().PersistentVolumeClaims(), Volumes: factory.Core().V1().PersistentVolumes(),
		Classes: factory.Storage().V1().StorageClasses(), Node: cfg.NodeDeployment,
		NoAttributesClasses: p.noClasses,
	}
	if topo {
		ccfg.Nodes, ccfg.CSINodes = factory.Core().V1().Nodes(), factory.Storage().V1().CSINodes()
	}
	claims, err := claim.New(ccfg)
	if err != nil {
		return err
	}
	claims.Register(r, cc.Workers)
	// A record another writer stored (a previous leader's last write) is found when a
	// write conflicts; its claim is synced like the records loaded above.
	p.journal.OnAdopt(func(rec intent.Record) { claims.Enqueue(rec.ClaimUID) })
	journalCtx, stopJournal := context.WithCancel(ctx)
	journalDone := make(chan struct{})
	go func() { defer close(journalDone); p.journal.Run(journalCtx) }()
	defer func() { stopJournal(); <-journalDone }()

	rcfg := reclaim.Config{ControllerConfig: cc, Recorder: recorder, Metrics: m, Volumes: factory.Core().V1().PersistentVolumes()}
	if nd := cfg.NodeDeployment; nd != nil {
		rcfg.NodeTopology = nd.Topology
	}
	if caps.Controller[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME] {
		rcfg.Attachments = factory.Storage().V1().VolumeAttachments()
	}
	volumes, err := reclaim.New(rcfg)
	if err != nil {
		return err
	}
	volumes.Register(r, cc.Workers)

	if cfg.Capacity.Enabled {
		capCC := cc
		capCC.Client = p.capacity
		capCtl, err := capacity.New(capacity.Config{
			ControllerConfig: capCC, Options: cfg.Capacity, Topology: topo,
			Classes: factory.Storage().V1().StorageClasses(), Nodes: factory.Core().V1().Nodes(), CSINodes: factory.Storage().V1().CSINodes(),
			NodeSegment: nodeSegment(cfg.NodeDeployment, topo), ManagedBy: nodeManagedBy(cfg.NodeDeployment),
		})
		if err != nil {
			return err
		}
		capCtl.Register(r)
	}

	// Leftovers from an earlier run: each is either finished (a PV exists), resumed (its
	// claim still waits) or cleaned up (its claim is gone).
	for _, rec := range records {
		claims.Enqueue(rec.ClaimUID)
	}
	if len(records) > 0 {
		klog.FromContext(ctx).Info("Resuming in-flight provisions recorded in the journal", "count", len(records), "namespace", cfg.IntentNamespace)
	}
	return r.Run(ctx)
}

// objectName is the driver's name as an object name: the Lease, as upstream names it.
func objectName(driver string) string { return strings.ToLower(csiclient.SanitizeDriverName(driver)) }
