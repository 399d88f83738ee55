package cli

import (
	"context"
	"os"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/component/provisioner"
	"github.com/kubevol/kubevol/internal/component/provisioner/claim"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Defaults that differ from upstream external-provisioner, with the reason in docs/provisioner.md.
const (
	// Upstream 5/10 caps provisioning at about 2.4 volumes/s (PR #447). The API server's
	// priority and fairness, not a client constant, is what protects it today.
	defaultKubeAPIQPS   = 200
	defaultKubeAPIBurst = 400
)

// provisionerFeatureGates are external-provisioner v6.4's gates; others are refused.
var provisionerFeatureGates = map[string]sidecar.FeatureGate{
	"Topology":                       {Default: true, PreRelease: "GA"},
	"CrossNamespaceVolumeDataSource": {Default: false, PreRelease: "Alpha"},
	"VolumeAttributesClass":          {Default: true, PreRelease: "GA"},
	"ReleaseLeaderElectionOnExit":    {Default: false, PreRelease: "Alpha"},
	// GA in v4 and gone from v6, but manifests written for v5 (ceph-csi, rook) still set it;
	// kubevol always honours the reclaim policy (the PV finalizer).
	"HonorPVReclaimPolicy": {Default: true, PreRelease: "GA"},
}

type provisionerOptions struct {
	cfg                 provisioner.Config
	showVersion         bool
	nodeDeployment      bool
	nodeName            string
	nodeDeploymentImm   bool
	nodeBaseDelay       time.Duration
	nodeMaxDelay        time.Duration
	cloningThreads      uint
	capacityThreads     uint
	snapshotSweep       time.Duration
	enablePprof         bool
	automaxprocs        bool
	deprecatedProvName  string
	deprecatedConnTimeo time.Duration
}

func newProvisionerCommand() *cobra.Command {
	o := &provisionerOptions{}
	cmd := &cobra.Command{
		Use:   "provisioner",
		Short: "CSI external provisioner: PVCs to CreateVolume and PVs",
		Long: `provisioner is a drop-in replacement for kubernetes-csi/external-provisioner: it takes the
same flags, writes the same PersistentVolumes, annotations, finalizers, events and metrics, and
records each CreateVolume on its claim first, so that a crash or a deleted claim never
leaks a backend volume. See docs/provisioner.md for the defaults that differ from upstream.`,
		RunE: runSidecar(&o.showVersion, o.validate, func(ctx context.Context) error { return provisioner.Run(ctx, o.cfg) }),
	}
	f := cmd.Flags()
	c := &o.cfg
	// Upstream has no resync flag and resyncs every 15 minutes; kubevol's --resync sets it.
	c.Sidecar.AddFlags(f, sidecar.Defaults{Timeout: 10 * time.Second, WorkerThreads: 100, KubeAPIQPS: defaultKubeAPIQPS, KubeAPIBurst: defaultKubeAPIBurst,
		Resync: 15 * time.Minute, ResyncFlag: "resync"})
	// Upstream's form is key:value (csi-lib-utils), not pflag's key=value.
	f.BoolVar(&o.showVersion, "version", false, "Show version.")
	f.StringVar(&c.Sidecar.Master, "master", "", "Master URL to build a client config from. Either this or kubeconfig needs to be set if the provisioner is being run out of cluster.")
	f.StringVar(&c.VolumeNamePrefix, "volume-name-prefix", "pvc", "Prefix to apply to the name of a created volume.")
	f.IntVar(&c.VolumeNameUUIDLength, "volume-name-uuid-length", -1, "Truncates generated UUID of a created volume to this length (1-32), or -1 for the full UID.")
	f.UintVar(&o.cloningThreads, "cloning-protection-threads", 1, "Accepted for compatibility; clone sources are released by the claim workers.")
	f.UintVar(&o.capacityThreads, "capacity-threads", 1, "Accepted for compatibility; capacity is computed by one level-triggered worker.")
	f.DurationVar(&o.snapshotSweep, "snapshot-orphan-sweep-interval", 5*time.Minute, "Accepted for compatibility; kubevol sets no snapshot finalizers that could be orphaned.")
	f.Float32Var(&c.CapacityQPS, "kube-api-capacity-qps", 1, "QPS to use for storage capacity updates while communicating with the kubernetes apiserver.")
	f.IntVar(&c.CapacityBurst, "kube-api-capacity-burst", 5, "Burst to use for storage capacity updates while communicating with the kubernetes apiserver.")
	c.Sidecar.AddFeatureGates(f, provisionerFeatureGates)
	f.BoolVar(&c.StrictTopology, "strict-topology", false, "Late binding: pass only the selected node's topology to CreateVolume.")
	f.BoolVar(&c.ImmediateTopology, "immediate-topology", true, "Immediate binding: pass the aggregated cluster topologies to CreateVolume. If false, pass no topology unless the StorageClass has allowedTopologies.")
	f.BoolVar(&c.ExtraCreateMetadata, "extra-create-metadata", false, "If set, add pv/pvc metadata to plugin create requests as parameters.")
	f.StringVar(&c.DefaultFSType, "default-fstype", "", "The default filesystem type of the volume to provision when fstype is unspecified in the StorageClass. If the default is not set and fstype is unset in the StorageClass, then no fstype will be set")
	f.BoolVar(&c.Capacity.Enabled, "enable-capacity", false, "This enables producing CSIStorageCapacity objects with capacity information from the driver's GetCapacity call. Needs $NAMESPACE.")
	f.BoolVar(&c.Capacity.ForImmediateBinding, "capacity-for-immediate-binding", false, "Enables producing capacity information for storage classes with immediate binding. Not needed for the Kubernetes scheduler, maybe useful for other consumers or for debugging.")
	f.DurationVar(&c.Capacity.PollInterval, "capacity-poll-interval", time.Minute, "How long the external-provisioner waits before checking for storage capacity changes.")
	f.IntVar(&c.Capacity.OwnerrefLevel, "capacity-ownerref-level", 1, "The level indicates the number of objects that need to be traversed starting from the pod identified by the POD_NAME and NAMESPACE environment variables to reach the owning object for CSIStorageCapacity objects: -1 for no owner, 0 for the pod itself, 1 for a StatefulSet or DaemonSet, 2 for a Deployment.")
	f.BoolVar(&o.nodeDeployment, "node-deployment", false, "Enables deploying the external-provisioner together with a CSI driver on nodes to manage node-local volumes. Needs $NODE_NAME (or --node-name).")
	f.StringVar(&o.nodeName, "node-name", "", "kubevol: the node of a --node-deployment instance (default: $NODE_NAME).")
	f.BoolVar(&o.nodeDeploymentImm, "node-deployment-immediate-binding", true, "Determines whether immediate binding is supported when deployed on each node.")
	f.DurationVar(&o.nodeBaseDelay, "node-deployment-base-delay", 20*time.Second, "Determines how long the external-provisioner sleeps initially before trying to own a PVC with immediate binding.")
	f.DurationVar(&o.nodeMaxDelay, "node-deployment-max-delay", 60*time.Second, "Determines how long the external-provisioner sleeps at most before trying to own a PVC with immediate binding.")
	f.BoolVar(&c.ControllerPublishReadOnly, "controller-publish-readonly", false, "This option enables PV to be marked as readonly at controller publish volume call if PVC accessmode has been set to ROX.")
	f.BoolVar(&c.PreventVolumeModeConversion, "prevent-volume-mode-conversion", true, "Prevents an unauthorised user from modifying the volume mode when creating a PVC from an existing VolumeSnapshot.")
	f.BoolVar(&o.enablePprof, "enable-pprof", false, "Accepted for compatibility; pprof is not served.")
	f.BoolVar(&o.automaxprocs, "automaxprocs", false, "Set GOMAXPROCS from the container's CPU quota.")
	f.StringVar(&c.IntentNamespace, "intent-namespace", "", "kubevol: namespace of the provisioning journal's Leases (the records of volumes in flight). Defaults to the leader election's namespace (the flag, POD_NAMESPACE, the pod's ServiceAccount namespace); out of a cluster, to the kubeconfig context's namespace.")
	f.StringVar(&o.deprecatedProvName, "provisioner", "", "Deprecated and ignored: the driver name comes from GetPluginInfo.")
	f.DurationVar(&o.deprecatedConnTimeo, "connection-timeout", 0, "Deprecated and ignored: the provisioner waits for the driver forever.")
	for _, name := range []string{"provisioner", "connection-timeout"} {
		_ = f.MarkDeprecated(name, "it has no effect")
	}
	noEffect(f, "clone sources are released by the claim workers", "cloning-protection-threads")
	noEffect(f, "capacity is computed by one level-triggered worker", "capacity-threads")
	noEffect(f, "kubevol sets no snapshot source finalizers that could be orphaned", "snapshot-orphan-sweep-interval")
	noEffect(f, "pprof is not served", "enable-pprof")
	noEffect(f, reasonAutomaxprocs, "automaxprocs")
	return cmd
}

var prefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func (o *provisionerOptions) validate() error {
	c := &o.cfg
	if err := c.Sidecar.Validate(); err != nil {
		return flagError(err, sidecar.FlagNames("resync"))
	}
	switch n := c.VolumeNameUUIDLength; {
	case n == -1, n > 0 && n <= 32:
	default:
		return usageErrorf("--volume-name-uuid-length must be between 1 and 32, or -1 for the full UID; got %d", n)
	}
	if !prefixRE.MatchString(c.VolumeNamePrefix) || len(c.VolumeNamePrefix) > 200 {
		return usageErrorf("--volume-name-prefix %q: must be a lowercase DNS name part (a-z, 0-9, '-', '.') of at most 200 characters", c.VolumeNamePrefix)
	}
	if c.Capacity.PollInterval <= 0 {
		return usageErrorf("--capacity-poll-interval must be positive, got %s", c.Capacity.PollInterval)
	}
	if c.CapacityQPS <= 0 || c.CapacityBurst < 1 {
		return usageErrorf("--kube-api-capacity-qps must be positive and --kube-api-capacity-burst at least 1; got %v and %d", c.CapacityQPS, c.CapacityBurst)
	}
	if err := o.validateNodeDeployment(); err != nil {
		return err
	}
	if lvl := c.Capacity.OwnerrefLevel; lvl < -1 || lvl > 2 {
		return usageErrorf("--capacity-ownerref-level must be -1, 0, 1 or 2, got %d", lvl)
	}
	if c.Capacity.Enabled {
		c.Capacity.Namespace, c.Capacity.PodName = os.Getenv("NAMESPACE"), os.Getenv("POD_NAME")
		if c.Capacity.Namespace == "" {
			return usageErrorf("--enable-capacity needs the NAMESPACE environment variable (the namespace for CSIStorageCapacity objects)")
		}
		if c.Capacity.OwnerrefLevel >= 0 && c.Capacity.PodName == "" {
			return usageErrorf("--enable-capacity with --capacity-ownerref-level=%d needs the POD_NAME environment variable; use --capacity-ownerref-level=-1 for no owner", c.Capacity.OwnerrefLevel)
		}
	}
	warnGates(c.Sidecar.FeatureGates, provisionerFeatureGates, map[string]string{
		"Topology":                       "kubevol passes topology whenever the driver has VOLUME_ACCESSIBILITY_CONSTRAINTS",
		"CrossNamespaceVolumeDataSource": "kubevol does not provision from a data source in another namespace",
		"VolumeAttributesClass":          "kubevol passes the claim's VolumeAttributesClass parameters whenever the claim names one",
		"HonorPVReclaimPolicy":           "kubevol always deletes the volume of a deleted PV whose reclaim policy is Delete",
	})
	if c.IntentNamespace == "" {
		c.IntentNamespace = c.Sidecar.HomeNamespace(c.Sidecar.LeaderElection.Namespace)
	}
	return nil
}

// validateNodeDeployment fills the node deployment of --node-deployment (upstream: one
// provisioner per node, which takes only its node's claims and needs NODE_NAME).
func (o *provisionerOptions) validateNodeDeployment() error {
	if !o.nodeDeployment {
		return nil
	}
	if o.nodeName == "" {
		o.nodeName = os.Getenv("NODE_NAME")
	}
	if o.nodeName == "" {
		return usageErrorf("--node-deployment needs the NODE_NAME environment variable (or --node-name): the node this instance provisions for")
	}
	if o.nodeBaseDelay <= 0 || o.nodeMaxDelay < o.nodeBaseDelay {
		return usageErrorf("--node-deployment-base-delay must be positive and --node-deployment-max-delay at least as long; got %s and %s", o.nodeBaseDelay, o.nodeMaxDelay)
	}
	o.cfg.NodeDeployment = &claim.NodeDeployment{NodeName: o.nodeName, ImmediateBinding: o.nodeDeploymentImm,
		BaseDelay: o.nodeBaseDelay, MaxDelay: o.nodeMaxDelay}
	return nil
}
