// Package sidecar is what kubevol's CSI sidecars share: the controller processes that run
// beside a CSI driver's controller service and act on its behalf in the API (provisioner,
// attacher, resizer, snapshotter), as the kubernetes-csi external-* sidecars do. It holds:
//
//   - Options: the standard flags, with the csi-lib-utils "standardflags" names and
//     defaults, their validation (FieldError names the bad flag), and the client config;
//   - Connect: the connection to the driver (dial, probe, driver name) as a Sidecar;
//   - Run and RunRoles: leader election on a Lease (one Lease per role when a process runs
//     several) and the HTTP server for metrics and health;
//   - ControllerConfig: what every controller of a sidecar takes (client, driver
//     connection, workers, retry intervals, resync, queue metrics), with NewQueue and
//     NewEvents;
//   - the index of VolumeAttachments by PersistentVolume that several controllers read.
//
// The controllers themselves run on internal/runtime/controller.
package sidecar

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// LeaderElection configures the Lease-based election of upstream sidecars.
type LeaderElection struct {
	Enabled       bool
	Namespace     string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	Labels        map[string]string
}

// Options are the flags shared by the sidecars. Validate's errors name the fields (see
// FieldError); FlagNames maps them to the flags AddFlags registers.
type Options struct {
	CSIAddress string
	Kubeconfig string
	// Master overrides the API server address of the kubeconfig (upstream: provisioner only).
	Master             string
	Timeout            time.Duration
	WorkerThreads      int
	RetryIntervalStart time.Duration
	RetryIntervalMax   time.Duration
	KubeAPIQPS         float32
	KubeAPIBurst       int
	LeaderElection     LeaderElection
	HTTPEndpoint       string
	MetricsAddress     string // deprecated upstream alias of HTTPEndpoint
	MetricsPath        string
	// Resync is the informers' resync period: the safety net of level-triggered sync.
	Resync time.Duration
	// FeatureGates holds every gate the sidecar knows (AddFeatureGates), at its default
	// unless --feature-gates set it.
	FeatureGates map[string]bool
}

// Defaults are the per-sidecar defaults of the shared flags.
type Defaults struct {
	Timeout       time.Duration
	WorkerThreads int
	KubeAPIQPS    float32
	KubeAPIBurst  int
	// Resync is the default of the resync flag, named ResyncFlag (upstream: --resync for
	// the attacher, --resync-period for the resizer; the provisioner has none upstream).
	Resync     time.Duration
	ResyncFlag string
}

// AddFlags registers the shared flags under their upstream names.
func (o *Options) AddFlags(f *pflag.FlagSet, d Defaults) {
	f.StringVar(&o.CSIAddress, "csi-address", "/run/csi/socket", "Address of the CSI driver socket.")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "Absolute path to the kubeconfig file. Required only when running out of cluster; $KUBECONFIG overrides it.")
	f.DurationVar(&o.Timeout, "timeout", d.Timeout, "Timeout for waiting for each CSI call.")
	f.IntVar(&o.WorkerThreads, "worker-threads", d.WorkerThreads, "Number of worker threads, i.e. simultaneous CSI calls.")
	f.DurationVar(&o.RetryIntervalStart, "retry-interval-start", time.Second, "Initial retry interval of a failed operation. It doubles with each failure, up to retry-interval-max.")
	f.DurationVar(&o.RetryIntervalMax, "retry-interval-max", 5*time.Minute, "Maximum retry interval of a failed operation.")
	f.Float32Var(&o.KubeAPIQPS, "kube-api-qps", d.KubeAPIQPS, "QPS to use while communicating with the Kubernetes apiserver (negative: no client-side limit).")
	f.IntVar(&o.KubeAPIBurst, "kube-api-burst", d.KubeAPIBurst, "Burst to use while communicating with the Kubernetes apiserver.")
	f.BoolVar(&o.LeaderElection.Enabled, "leader-election", false, "Enable leader election; replicas wait for the Lease.")
	f.StringVar(&o.LeaderElection.Namespace, "leader-election-namespace", "", "Namespace of the leader election Lease. Defaults to the pod's namespace.")
	f.DurationVar(&o.LeaderElection.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long non-leaders wait before forcing leadership.")
	f.DurationVar(&o.LeaderElection.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader retries renewing before giving up.")
	f.DurationVar(&o.LeaderElection.RetryPeriod, "leader-election-retry-period", 5*time.Second, "How long clients wait between tries of leader election actions.")
	f.Var(&labelsValue{m: &o.LeaderElection.Labels}, "leader-election-labels", "Labels to add to the Lease when this replica leads, as key:value pairs separated by commas, as csi-lib-utils takes them.")
	f.StringVar(&o.HTTPEndpoint, "http-endpoint", "", "TCP address of the HTTP server for metrics and health checks (example: `:8080`). Empty disables it.")
	f.StringVar(&o.MetricsAddress, "metrics-address", "", "(deprecated) TCP address of the metrics endpoint. Only one of --metrics-address and --http-endpoint can be set.")
	f.StringVar(&o.MetricsPath, "metrics-path", "/metrics", "HTTP path of the Prometheus metrics.")
	f.DurationVar(&o.Resync, d.ResyncFlag, d.Resync, "Resync period of the informers: how often every object is checked again.")
}

// FlagNames maps the fields of Options, as Validate's errors name them, to the flags
// AddFlags registered for them; resyncFlag is the sidecar's name of the resync flag.
func FlagNames(resyncFlag string) map[string]string {
	return map[string]string{
		"CSIAddress": "--csi-address", "Timeout": "--timeout", "WorkerThreads": "--worker-threads",
		"RetryIntervalStart": "--retry-interval-start", "RetryIntervalMax": "--retry-interval-max",
		"KubeAPIQPS": "--kube-api-qps", "KubeAPIBurst": "--kube-api-burst",
		"LeaderElection.LeaseDuration": "--leader-election-lease-duration",
		"LeaderElection.RenewDeadline": "--leader-election-renew-deadline",
		"LeaderElection.RetryPeriod":   "--leader-election-retry-period",
		"HTTPEndpoint":                 "--http-endpoint", "MetricsAddress": "--metrics-address", "MetricsPath": "--metrics-path",
		"Resync": "--" + resyncFlag,
	}
}

// Validate checks the options and resolves the aliases. Its errors are *FieldError.
func (o *Options) Validate() error {
	if env := os.Getenv("KUBECONFIG"); env != "" {
		o.Kubeconfig = env // as upstream: the environment wins over the flag
	}
	if o.CSIAddress == "" {
		return Invalid("CSIAddress", "{CSIAddress} must not be empty")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"Timeout", o.Timeout}, {"RetryIntervalStart", o.RetryIntervalStart}, {"RetryIntervalMax", o.RetryIntervalMax},
		{"LeaderElection.LeaseDuration", o.LeaderElection.LeaseDuration},
		{"LeaderElection.RenewDeadline", o.LeaderElection.RenewDeadline},
		{"LeaderElection.RetryPeriod", o.LeaderElection.RetryPeriod},
		{"Resync", o.Resync},
	} {
		if d.v <= 0 {
			return Invalid(d.name, "{%s} must be positive, got %s", d.name, d.v)
		}
	}
	if o.RetryIntervalMax < o.RetryIntervalStart {
		return Invalid("RetryIntervalMax", "{RetryIntervalMax} (%s) must not be less than {RetryIntervalStart} (%s)", o.RetryIntervalMax, o.RetryIntervalStart)
	}
	if le := o.LeaderElection; le.Enabled && (le.LeaseDuration <= le.RenewDeadline || float64(le.RenewDeadline) <= 1.2*float64(le.RetryPeriod)) {
		return Invalid("LeaderElection.LeaseDuration", "leader election needs {LeaderElection.LeaseDuration} (%s) > {LeaderElection.RenewDeadline} (%s) > 1.2 × {LeaderElection.RetryPeriod} (%s)",
			le.LeaseDuration, le.RenewDeadline, le.RetryPeriod)
	}
	if o.WorkerThreads < 1 || o.WorkerThreads > 10000 {
		return Invalid("WorkerThreads", "{WorkerThreads} must be between 1 and 10000, got %d", o.WorkerThreads)
	}
	if o.KubeAPIQPS == 0 || o.KubeAPIQPS > 0 && o.KubeAPIBurst < 1 {
		return Invalid("KubeAPIQPS", "{KubeAPIQPS} must be non-zero (negative disables client-side throttling) and {KubeAPIBurst} at least 1; got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst)
	}
	if o.HTTPEndpoint != "" && o.MetricsAddress != "" {
		return Invalid("MetricsAddress", "only one of {MetricsAddress} and {HTTPEndpoint} can be set")
	}
	if o.MetricsAddress != "" {
		o.HTTPEndpoint = o.MetricsAddress
	}
	if !strings.HasPrefix(o.MetricsPath, "/") {
		return Invalid("MetricsPath", "{MetricsPath} %q must start with /", o.MetricsPath)
	}
	return nil
}

// RESTConfig builds the client config: the kubeconfig and master when given, else
// in-cluster.
func (o *Options) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" || o.Master != "" {
		cfg, err = clientcmd.BuildConfigFromFlags(o.Master, o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	UseProtobuf(cfg)
	return cfg, nil
}

// Content types of the Kubernetes API.
const (
	contentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	contentTypeJSON     = "application/json"
)

// UseProtobuf makes the built-in clientset speak protobuf, as kube-controller-manager and
// the kubelet configure theirs (ContentType protobuf, Accept protobuf then JSON): encoding
// and decoding cost a fraction of JSON's CPU and garbage. client-go 1.37's typed clients
// already prefer protobuf when no content type is set, so this mostly pins the choice for
// every request made from the config. Custom resources (VolumeSnapshots) are served only as
// JSON: dynamic.NewForConfig works on a copy of the config that it sets to JSON itself.
func UseProtobuf(cfg *rest.Config) {
	cfg.ContentType = contentTypeProtobuf
	cfg.AcceptContentTypes = contentTypeProtobuf + "," + contentTypeJSON
}

// LeaseNamespace resolves the Lease namespace as upstream: the flag, POD_NAMESPACE, the
// service account's namespace, then "default".
func LeaseNamespace(flag string) string {
	if ns := podNamespace(flag); ns != "" {
		return ns
	}
	return "default"
}

// HomeNamespace is LeaseNamespace for state of kubevol's own (the provisioning journal),
// which must live where the role grants leases: out of cluster, before "default", the
// namespace of the kubeconfig's context, which a ServiceAccount's kubeconfig names.
func (o *Options) HomeNamespace(flag string) string {
	if ns := podNamespace(flag); ns != "" {
		return ns
	}
	if o.Kubeconfig != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: o.Kubeconfig}
		if ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).Namespace(); err == nil && ns != "" {
			return ns
		}
	}
	return "default"
}

func podNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// labelsValue parses the csi-lib-utils form of --leader-election-labels: k:v,k2:v2.
type labelsValue struct{ m *map[string]string }

func (l *labelsValue) String() string { return fmt.Sprint(*l.m) }
func (l *labelsValue) Type() string   { return "labels" }
func (l *labelsValue) Set(s string) error {
	if *l.m == nil {
		*l.m = map[string]string{}
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), ":")
		if !ok || k == "" {
			return fmt.Errorf("%q is not key:value", kv)
		}
		(*l.m)[k] = v
	}
	return nil
}

// FeatureGate is one gate of an upstream sidecar's --feature-gates.
type FeatureGate struct {
	Default bool
	// PreRelease is Alpha, Beta or GA: AllAlpha=true and AllBeta=true turn on the gates of
	// their stage that the flag does not name, as component-base's gates do.
	PreRelease string
}

// AddFeatureGates registers --feature-gates with the gates known to the sidecar, as
// upstream's k=v,k2=v2 form (strconv booleans). An unknown gate is a parse error, so the
// command exits 2, as upstream refuses it.
func (o *Options) AddFeatureGates(f *pflag.FlagSet, known map[string]FeatureGate) {
	o.FeatureGates = map[string]bool{}
	for name, g := range known {
		o.FeatureGates[name] = g.Default
	}
	f.Var(&gatesValue{gates: o.FeatureGates, known: known}, "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+GateList(known))
}

// GateList describes the known gates, one a line, as upstream's help does.
func GateList(known map[string]FeatureGate) string {
	out := []string{"AllAlpha=true|false (ALPHA - default=false)", "AllBeta=true|false (BETA - default=false)"}
	for _, name := range slices.Sorted(maps.Keys(known)) {
		g := known[name]
		out = append(out, fmt.Sprintf("%s=true|false (%s - default=%v)", name, strings.ToUpper(g.PreRelease), g.Default))
	}
	return strings.Join(out, "\n")
}

type gatesValue struct {
	gates map[string]bool
	known map[string]FeatureGate
	set   []string // the gates the flag named, in order
}

func (g *gatesValue) Type() string { return "mapStringBool" }

func (g *gatesValue) String() string {
	var out []string
	for _, name := range g.set {
		out = append(out, fmt.Sprintf("%s=%v", name, g.gates[name]))
	}
	return strings.Join(out, ",")
}

func (g *gatesValue) Set(s string) error {
	stages := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return fmt.Errorf("missing bool value for %s", k)
		}
		on, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("invalid value of %s=%s, err: %v", k, v, err)
		}
		switch k {
		case "AllAlpha":
			stages["Alpha"] = on
			continue
		case "AllBeta":
			stages["Beta"] = on
			continue
		}
		if _, known := g.known[k]; !known {
			return fmt.Errorf("unrecognized feature gate: %s", k)
		}
		g.gates[k] = on
		if !slices.Contains(g.set, k) {
			g.set = append(g.set, k)
		}
	}
	for name, gate := range g.known {
		if on, ok := stages[gate.PreRelease]; ok && !slices.Contains(g.set, name) {
			g.gates[name] = on
		}
	}
	return nil
}
