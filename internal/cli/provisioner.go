package cli

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/provisioner"
	"github.com/kubevol/kubevol/internal/sidecar"
	"github.com/kubevol/kubevol/internal/version"
)

// Defaults that differ from upstream external-provisioner, with the reason in docs/provisioner.md.
const (
	// Upstream 5/10 caps provisioning at about 2.4 volumes/s (PR #447). The API server's
	// priority and fairness, not a client constant, is what protects it today.
	defaultKubeAPIQPS   = 200
	defaultKubeAPIBurst = 400
)

// provisionerFeatureGates are the gates upstream defines; others are refused.
var provisionerFeatureGates = map[string]bool{
	"Topology": true, "CrossNamespaceVolumeDataSource": false, "VolumeAttributesClass": true, "ReleaseLeaderElectionOnExit": false,
}

type provisionerOptions struct {
	cfg                 provisioner.Config
	showVersion         bool
	featureGates        map[string]bool
	nodeDeployment      bool
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.showVersion {
				fmt.Fprintln(cmd.OutOrStdout(), version.String())
				return nil
			}
			if err := o.validate(cmd.Flags()); err != nil {
				return err
			}
			return provisioner.Run(cmd.Context(), o.cfg)
		},
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
	f.Var(newGatesValue(&o.featureGates, provisionerFeatureGates), "feature-gates", "A set of key=value pairs that describe feature gates: "+gateList(provisionerFeatureGates))
	f.BoolVar(&c.StrictTopology, "strict-topology", false, "Late binding: pass only the selected node's topology to CreateVolume.")
	f.BoolVar(&c.ImmediateTopology, "immediate-topology", true, "Immediate binding: pass the aggregated cluster topologies to CreateVolume. If false, pass no topology unless the StorageClass has allowedTopologies.")
	f.BoolVar(&c.ExtraCreateMetadata, "extra-create-metadata", false, "If set, add pv/pvc metadata to plugin create requests as parameters.")
	f.StringVar(&c.DefaultFSType, "default-fstype", "", "The default filesystem type of the volume to provision when fstype is unspecified in the StorageClass. If the default is not set and fstype is unset in the StorageClass, then no fstype will be set")
	f.BoolVar(&c.Capacity.Enabled, "enable-capacity", false, "This enables producing CSIStorageCapacity objects with capacity information from the driver's GetCapacity call. Needs $NAMESPACE.")
	f.BoolVar(&c.Capacity.ForImmediateBinding, "capacity-for-immediate-binding", false, "Enables producing capacity information for storage classes with immediate binding. Not needed for the Kubernetes scheduler, maybe useful for other consumers or for debugging.")
	f.DurationVar(&c.Capacity.PollInterval, "capacity-poll-interval", time.Minute, "How long the external-provisioner waits before checking for storage capacity changes.")
	f.IntVar(&c.Capacity.OwnerrefLevel, "capacity-ownerref-level", 1, "The level indicates the number of objects that need to be traversed starting from the pod identified by the POD_NAME and NAMESPACE environment variables to reach the owning object for CSIStorageCapacity objects: -1 for no owner, 0 for the pod itself, 1 for a StatefulSet or DaemonSet, 2 for a Deployment.")
	f.BoolVar(&o.nodeDeployment, "node-deployment", false, "Distributed, per-node provisioning (not supported by kubevol yet).")
	f.BoolVar(&o.nodeDeploymentImm, "node-deployment-immediate-binding", true, "Determines whether immediate binding is supported when deployed on each node.")
	f.DurationVar(&o.nodeBaseDelay, "node-deployment-base-delay", 20*time.Second, "Determines how long the external-provisioner sleeps initially before trying to own a PVC with immediate binding.")
	f.DurationVar(&o.nodeMaxDelay, "node-deployment-max-delay", 60*time.Second, "Determines how long the external-provisioner sleeps at most before trying to own a PVC with immediate binding.")
	f.BoolVar(&c.ControllerPublishReadOnly, "controller-publish-readonly", false, "This option enables PV to be marked as readonly at controller publish volume call if PVC accessmode has been set to ROX.")
	f.BoolVar(&c.PreventVolumeModeConversion, "prevent-volume-mode-conversion", true, "Prevents an unauthorised user from modifying the volume mode when creating a PVC from an existing VolumeSnapshot.")
	f.BoolVar(&o.enablePprof, "enable-pprof", false, "Accepted for compatibility; pprof is not served.")
	f.BoolVar(&o.automaxprocs, "automaxprocs", false, "Accepted for compatibility; Go sets GOMAXPROCS from the cgroup quota itself since Go 1.25.")
	f.StringVar(&c.IntentNamespace, "intent-namespace", "", "kubevol: no longer used (the provisioning records live on the claims); accepted for compatibility.")
	f.StringVar(&o.deprecatedProvName, "provisioner", "", "Deprecated and ignored: the driver name comes from GetPluginInfo.")
	f.DurationVar(&o.deprecatedConnTimeo, "connection-timeout", 0, "Deprecated and ignored: the provisioner waits for the driver forever.")
	for _, name := range []string{"provisioner", "connection-timeout"} {
		_ = f.MarkDeprecated(name, "it has no effect")
	}
	return cmd
}

var prefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func (o *provisionerOptions) validate(flags *pflag.FlagSet) error {
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
	if o.nodeDeployment {
		return usageErrorf("--node-deployment is not supported by kubevol yet: run one central provisioner (with --leader-election for replicas)")
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
	if on, ok := o.featureGates["Topology"]; ok && !on {
		return usageErrorf("--feature-gates Topology=false is not supported: topology is GA and always on when the driver supports it")
	}
	if on := o.featureGates["CrossNamespaceVolumeDataSource"]; on {
		return usageErrorf("--feature-gates CrossNamespaceVolumeDataSource=true is not supported by kubevol yet")
	}
	if c.IntentNamespace == "" {
		c.IntentNamespace = sidecar.LeaseNamespace(c.Sidecar.LeaderElection.Namespace)
	}
	for _, name := range []string{"cloning-protection-threads", "capacity-threads", "snapshot-orphan-sweep-interval", "enable-pprof", "automaxprocs",
		"node-deployment-immediate-binding", "node-deployment-base-delay", "node-deployment-max-delay"} {
		if flags.Changed(name) {
			klog.Background().Info("Flag accepted for compatibility has no effect in kubevol", "flag", "--"+name)
		}
	}
	return nil
}

// gatesValue parses --feature-gates key=bool,key=bool into a map of known gates.
type gatesValue struct {
	m     *map[string]bool
	known map[string]bool // the gates and their defaults
}

func newGatesValue(m *map[string]bool, known map[string]bool) *gatesValue {
	*m = map[string]bool{}
	return &gatesValue{m: m, known: known}
}

func (g *gatesValue) String() string { return fmt.Sprint(*g.m) }
func (g *gatesValue) Type() string   { return "mapStringBool" }
func (g *gatesValue) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("missing bool value for %s", k)
		}
		if _, known := g.known[k]; !known {
			return fmt.Errorf("unrecognized feature gate: %s (known: %s)", k, gateList(g.known))
		}
		switch strings.ToLower(v) {
		case "true":
			(*g.m)[k] = true
		case "false":
			(*g.m)[k] = false
		default:
			return fmt.Errorf("invalid value of %s: %s, err: want true or false", k, v)
		}
	}
	return nil
}

func gateList(known map[string]bool) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(known)) {
		out = append(out, fmt.Sprintf("%s=true|false (default %v)", k, known[k]))
	}
	return strings.Join(out, ", ")
}
