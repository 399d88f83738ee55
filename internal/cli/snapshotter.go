package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/csisnapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/groupcontroller"
	"github.com/kubevol/kubevol/internal/component/snapshotter/groupsidecar"
	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snapshotcontroller"
	"github.com/kubevol/kubevol/internal/runtime/apicheck"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// snapshotterFeatureGates are the gates of the upstream snapshot-controller and
// csi-snapshotter: CSIVolumeGroupSnapshot (GA, on) turns the group snapshot halves of both roles on.
var snapshotterFeatureGates = map[string]sidecar.FeatureGate{
	"CSIVolumeGroupSnapshot":      {Default: true, PreRelease: "GA"},
	"ReleaseLeaderElectionOnExit": {Default: false, PreRelease: "Alpha"},
}

type snapshotterOptions struct {
	sidecar             sidecar.Options
	controllerRole      bool
	sidecarRole         bool
	namePrefix          string
	uuidLength          int
	groupPrefix         string
	groupUUIDLength     int
	extraCreateMetadata bool
	nodeDeployment      bool
	nodeName            string // $NODE_NAME with --node-deployment
	distributed         bool
	preventModeChange   bool
	retryCRDMax         time.Duration
	automaxprocs        bool
	showVersion         bool
}

// snapshotterRole selects what a snapshotter command runs and which flags it takes.
type snapshotterRole int

const (
	bothRoles      snapshotterRole = iota // kubevol snapshotter: either or both, for kubevol up
	sidecarRole                           // csi-snapshotter: upstream's sidecar and its flags only
	controllerRole                        // snapshot-controller: upstream's controller and its flags only
)

// Flags only one of upstream's two binaries has (the others they share).
var (
	csiSnapshotterOnlyFlags = []string{"csi-address", "timeout", "metrics-address", "leader-election-labels",
		"snapshot-name-prefix", "snapshot-name-uuid-length", "groupsnapshot-name-prefix", "groupsnapshot-name-uuid-length",
		"extra-create-metadata", "node-deployment"}
	snapshotControllerOnlyFlags = []string{"enable-distributed-snapshotting", "prevent-volume-mode-conversion", "retry-crd-interval-max"}
)

func newSnapshotterCommand() *cobra.Command { return newSnapshotterRoleCommand(bothRoles) }

func newCSISnapshotterCommand() *cobra.Command { return newSnapshotterRoleCommand(sidecarRole) }

func newSnapshotControllerCommand() *cobra.Command { return newSnapshotterRoleCommand(controllerRole) }

func newSnapshotterRoleCommand(role snapshotterRole) *cobra.Command {
	o := &snapshotterOptions{controllerRole: role != sidecarRole, sidecarRole: role != controllerRole}
	cmd := &cobra.Command{
		Use:   "snapshotter",
		Short: "VolumeSnapshots: the snapshot-controller and the csi-snapshotter sidecar, either or both",
		Long: `snapshotter replaces kubernetes-csi/external-snapshotter's two components, with their flags,
Leases, annotations and finalizers: the snapshot-controller (--snapshot-controller; one per
cluster: default classes, contents of dynamic snapshots, binding, finalizers, deletion) and the
csi-snapshotter sidecar (--csi-snapshotter; one per driver: CreateSnapshot, ListSnapshots,
DeleteSnapshot and the contents' status). Both run by default; turn one off to run beside the
other's upstream counterpart, or run csi-snapshotter or snapshot-controller, which are one role
each with exactly that upstream binary's flags. A kill -9 at any point leaks no backend snapshot.`,
		RunE: runSidecar(&o.showVersion, o.validate, o.run),
	}
	switch role {
	case sidecarRole:
		cmd.Use, cmd.Short = "csi-snapshotter", "The csi-snapshotter sidecar alone: CreateSnapshot, DeleteSnapshot and the contents' status for the driver at --csi-address"
		cmd.Long = `csi-snapshotter replaces kubernetes-csi/external-snapshotter's csi-snapshotter sidecar, with its
flags, Lease (external-snapshotter-leader-<driver>), annotations and finalizers. It runs beside
a snapshot-controller, kubevol's or upstream's.`
	case controllerRole:
		cmd.Use, cmd.Short = "snapshot-controller", "The snapshot-controller alone: default classes, dynamic contents, binding and deletion; needs no driver"
		cmd.Long = `snapshot-controller replaces kubernetes-csi/external-snapshotter's snapshot-controller, with its
flags, Lease (` + snapshotter.ControllerLease + `), annotations and finalizers. Run one per cluster.`
	}
	all := pflag.NewFlagSet(cmd.Use, pflag.ContinueOnError)
	// Upstream's defaults (a 1 min CSI timeout), except the client QPS, as for the other sidecars.
	o.sidecar.AddFlags(all, sidecar.Defaults{Timeout: time.Minute, WorkerThreads: 10, KubeAPIQPS: 200, KubeAPIBurst: 400,
		Resync: 15 * time.Minute, ResyncFlag: "resync-period"})
	o.sidecar.AddFeatureGates(all, snapshotterFeatureGates)
	if role == bothRoles {
		all.BoolVar(&o.controllerRole, "snapshot-controller", true, "Run the snapshot-controller role (Lease "+snapshotter.ControllerLease+").")
		all.BoolVar(&o.sidecarRole, "csi-snapshotter", true, "Run the csi-snapshotter role for the driver at --csi-address (Lease external-snapshotter-leader-<driver>).")
	}
	all.StringVar(&o.namePrefix, "snapshot-name-prefix", "snapshot", "Prefix of the CreateSnapshot name: <prefix>-<VolumeSnapshot UID>.")
	all.IntVar(&o.uuidLength, "snapshot-name-uuid-length", -1, "Length of the UID part of the CreateSnapshot name, dashes removed (-1: the whole UID with dashes).")
	all.StringVar(&o.groupPrefix, "groupsnapshot-name-prefix", "groupsnapshot", "Prefix of the CreateVolumeGroupSnapshot name: <prefix>-<VolumeGroupSnapshot UID>.")
	all.IntVar(&o.groupUUIDLength, "groupsnapshot-name-uuid-length", -1, "Length of the UID part of the CreateVolumeGroupSnapshot name, dashes removed (-1: the whole UID with dashes).")
	all.BoolVar(&o.extraCreateMetadata, "extra-create-metadata", false, "Add csi.storage.k8s.io/volumesnapshot/name, /volumesnapshot/namespace and /volumesnapshotcontent/name to the CreateSnapshot parameters.")
	all.BoolVar(&o.nodeDeployment, "node-deployment", false, "Run one csi-snapshotter per node, beside the driver's node plugin, for node-local volumes: it handles only the contents labelled "+snapshotter.LabelManagedBy+"=$NODE_NAME. Needs $NODE_NAME; not with --leader-election.")
	all.BoolVar(&o.distributed, "enable-distributed-snapshotting", false, "Label each dynamic content "+snapshotter.LabelManagedBy+"=<node> with the node its source volume's node affinity selects, for csi-snapshotters with --node-deployment (the controller then watches Nodes).")
	all.BoolVar(&o.preventModeChange, "prevent-volume-mode-conversion", true, "Record the source volume mode on new contents, so that a restore cannot change it.")
	all.DurationVar(&o.retryCRDMax, "retry-crd-interval-max", 30*time.Second, "How long the snapshot-controller waits for the snapshot.storage.k8s.io/v1 CRDs before it exits.")
	all.BoolVar(&o.automaxprocs, "automaxprocs", false, "Set GOMAXPROCS from the container's CPU quota.")
	noEffect(all, reasonAutomaxprocs, "automaxprocs")
	all.BoolVar(&o.showVersion, "version", false, "Show version.")
	var skip []string
	switch role {
	case sidecarRole:
		skip = snapshotControllerOnlyFlags
	case controllerRole:
		skip = csiSnapshotterOnlyFlags
	}
	all.VisitAll(func(fl *pflag.Flag) {
		if !slices.Contains(skip, fl.Name) {
			cmd.Flags().AddFlag(fl)
		}
	})
	return cmd
}

func (o *snapshotterOptions) validate() error {
	if err := o.sidecar.Validate(); err != nil {
		return flagError(err, sidecar.FlagNames("resync-period"))
	}
	switch {
	case !o.controllerRole && !o.sidecarRole:
		return usageErrorf("--snapshot-controller=false and --csi-snapshotter=false leave nothing to run")
	case o.namePrefix == "":
		return usageErrorf("--snapshot-name-prefix must not be empty")
	case o.uuidLength == 0 || o.uuidLength < -1 || o.uuidLength > 32:
		return usageErrorf("--snapshot-name-uuid-length must be -1 or between 1 and 32, got %d", o.uuidLength)
	case o.groupPrefix == "":
		return usageErrorf("--groupsnapshot-name-prefix must not be empty")
	case o.groupUUIDLength == 0 || o.groupUUIDLength < -1 || o.groupUUIDLength > 32:
		return usageErrorf("--groupsnapshot-name-uuid-length must be -1 or between 1 and 32, got %d", o.groupUUIDLength)
	case o.retryCRDMax <= 0:
		return usageErrorf("--retry-crd-interval-max must be positive, got %s", o.retryCRDMax)
	}
	if o.nodeDeployment && o.sidecarRole {
		// Upstream's per-node sidecar: its node from the environment, and no Lease (each
		// node's sidecar has its own contents).
		if o.nodeName = os.Getenv("NODE_NAME"); o.nodeName == "" {
			return usageErrorf("--node-deployment needs the NODE_NAME environment variable: the node whose contents this csi-snapshotter handles")
		}
		if o.sidecar.LeaderElection.Enabled {
			return usageErrorf("--node-deployment and --leader-election exclude each other: each node's csi-snapshotter handles that node's contents alone")
		}
	}
	return nil
}

func (o *snapshotterOptions) run(ctx context.Context) error {
	var roles []sidecar.Role
	var cfg *rest.Config
	var client kubernetes.Interface
	var reg *prometheus.Registry
	var queueMetrics *controller.QueueMetrics
	var served apicheck.Result
	groups := func() bool { return o.groupsEnabled() && served.On(groupFeature) }
	if o.sidecarRole {
		sc, err := sidecar.Connect(ctx, "snapshotter", &o.sidecar)
		if err != nil {
			return err
		}
		defer sc.Close()
		cfg, client, reg, queueMetrics = sc.RESTConfig, sc.Client, sc.Registry, sc.QueueMetrics
		if served, err = o.checkAPIs(ctx, client); err != nil {
			return err
		}
		ctrl, err := csisnapshotter.New(ctx, csisnapshotter.Config{
			ControllerConfig: sc.ControllerConfig(),
			Snap:             snapClient(cfg), NamePrefix: o.namePrefix, UUIDLength: o.uuidLength,
			ExtraCreateMetadata: o.extraCreateMetadata, NodeName: o.nodeName,
		})
		if err != nil {
			return err
		}
		run, err := o.withGroupSidecar(ctx, groups(), ctrl.Run, groupsidecar.Config{
			ControllerConfig: sc.ControllerConfig(), Snap: snapClient(cfg), NamePrefix: o.groupPrefix, UUIDLength: o.groupUUIDLength,
			ExtraCreateMetadata: o.extraCreateMetadata, NodeName: o.nodeName,
		})
		if err != nil {
			return err
		}
		roles = append(roles, sidecar.Role{Lease: snapshotter.SidecarLease(sc.Driver), Run: run})
	} else {
		// The snapshot-controller alone needs no driver.
		var err error
		if cfg, err = o.sidecar.RESTConfig(); err != nil {
			return err
		}
		cfg.UserAgent = "kubevol-snapshotter"
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		queueMetrics = controller.NewQueueMetrics(reg)
		if served, err = o.checkAPIs(ctx, client); err != nil {
			return err
		}
	}
	if o.controllerRole {
		snap := snapClient(cfg)
		if err := waitForCRDs(ctx, snap, o.retryCRDMax); err != nil {
			return err
		}
		common := snapshotcontroller.RoleConfig{
			Client: client, Snap: snap, Workers: o.sidecar.WorkerThreads,
			RetryIntervalStart: o.sidecar.RetryIntervalStart, RetryIntervalMax: o.sidecar.RetryIntervalMax,
			Resync: o.sidecar.Resync, PreventVolumeModeConversion: o.preventModeChange, QueueMetrics: queueMetrics,
			Metrics:     opmetrics.New(reg),
			Distributed: o.distributed,
		}
		ctrl, err := snapshotcontroller.New(ctx, snapshotcontroller.Config{RoleConfig: common})
		if err != nil {
			return err
		}
		run, err := o.withGroupController(ctx, groups(), ctrl.Run, groupcontroller.Config{RoleConfig: common})
		if err != nil {
			return err
		}
		roles = append([]sidecar.Role{{Lease: snapshotter.ControllerLease, Run: run}}, roles...)
	}
	return sidecar.RunRoles(ctx, o.sidecar, client, reg, roles...)
}

// snapClient is the snapshot API client: custom resources have no protobuf form.
func snapClient(cfg *rest.Config) snapclient.Interface {
	c := rest.CopyConfig(cfg)
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	return snapclient.NewForConfigOrDie(c)
}

// waitForCRDs lists the three v1 kinds until it works, as upstream's snapshot-controller
// does before it starts, with a backoff up to max; then it gives up.
func waitForCRDs(ctx context.Context, snap snapclient.Interface, max time.Duration) error {
	var last error
	deadline := time.Now().Add(max)
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		opts := metav1.ListOptions{Limit: 1}
		_, last = snap.SnapshotV1().VolumeSnapshots("").List(ctx, opts)
		if last == nil {
			_, last = snap.SnapshotV1().VolumeSnapshotContents().List(ctx, opts)
		}
		if last == nil {
			_, last = snap.SnapshotV1().VolumeSnapshotClasses().List(ctx, opts)
		}
		if last == nil {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("the snapshot.storage.k8s.io/v1 CRDs are not served after %s (install them: `kubevol up` does): %w", max, last)
		}
		klog.FromContext(ctx).V(2).Info("Waiting for the snapshot CRDs", "err", last)
		return false, nil
	})
	return err
}
