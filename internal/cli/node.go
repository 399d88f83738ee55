package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/nodeagent"
	"github.com/kubevol/kubevol/internal/component/nodeagent/nodecert"
)

type nodeOptions struct {
	kubeconfig     string
	bootstrap      string
	taints         string
	parsedTaints   []v1.Taint
	nodeName       string
	rootDir        string
	metricsAddress string
	resync         time.Duration
	leaseDuration  time.Duration
	statusInterval time.Duration
	sizeInterval   time.Duration
	syncFrequency  time.Duration
	qps            float32
	burst          int
	seLinux        string
	parsedSELinux  *bool
}

func newNodeCommand() *cobra.Command {
	o := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "node agent: the kubelet volume manager for one node",
		Long: `node registers a Node (Lease heartbeat, Ready, capacity) and sets up the volumes of the pods
bound to it: emptyDir, hostPath, configMap, secret, downwardAPI and projected, in the kubelet's
on-disk layout under --root-dir (pods/<uid>/volumes/<plugin>/<volume>). ConfigMap and Secret
changes reach the files within a second. It reports each pod's volumes with events and the
kubevol.io/VolumesReady condition, and completes the deletion of pods once their volumes are
torn down. It runs no containers; pods stay in phase Pending.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file with the node's credential; empty means in-cluster configuration. With --bootstrap-kubeconfig it is written when missing or expiring")
	f.StringVar(&o.bootstrap, "bootstrap-kubeconfig", "", "kubeconfig whose credential requests the node's client certificate (CSR for system:node:<node-name>) when --kubeconfig has none; "+inClusterBootstrap+" uses the pod's service-account token (for kubevol csr-approver). The certificate is kept in <root-dir>/pki and renewed before it expires")
	f.StringVar(&o.taints, "register-with-taints", nodeagent.CompanionTaint, "taints of the Node when the agent creates it, <key>=<value>:<effect>,... (the kubelet's flag); empty for none. The default keeps workloads off a companion Node, which runs no containers")
	f.StringVar(&o.nodeName, "node-name", host, "name of the Node object to register")
	f.StringVar(&o.rootDir, "root-dir", "/var/lib/kubevol", "directory for pod volumes; /var/lib/kubelet gives the kubelet's paths")
	f.StringVar(&o.metricsAddress, "metrics-address", ":9810", "address of /metrics and /healthz; empty disables them")
	f.DurationVar(&o.resync, "resync-period", 10*time.Minute, "safety-net resync of every pod and volume")
	f.DurationVar(&o.leaseDuration, "lease-duration", 40*time.Second, "duration of the node Lease; renewed every quarter of it")
	f.DurationVar(&o.statusInterval, "node-status-interval", time.Minute, "how often the Node status is refreshed when nothing changes")
	f.DurationVar(&o.sizeInterval, "emptydir-size-interval", 30*time.Second, "how often disk-backed emptyDirs with a sizeLimit are measured")
	f.DurationVar(&o.syncFrequency, "sync-frequency", time.Minute, "how often volumes of CSI drivers with requiresRepublish are published again, and the claims of running pods read again (the kubelet's flag)")
	f.Float32Var(&o.qps, "kube-api-qps", 50, "client-side QPS limit towards the API server")
	f.IntVar(&o.burst, "kube-api-burst", 100, "client-side burst towards the API server")
	f.StringVar(&o.seLinux, "selinux-enabled", "auto", "whether the host runs SELinux, so that volumes are mounted with their pods' SELinux context (-o context=) where the driver supports it: auto detects it from /sys/fs/selinux as the kubelet does; true or false say it where the agent cannot see the host's selinuxfs (a container without it)")
	return cmd
}

func (o *nodeOptions) validate() error {
	if errs := validation.IsDNS1123Subdomain(o.nodeName); len(errs) > 0 {
		return usageErrorf("--node-name %q: %s", o.nodeName, errs[0])
	}
	if o.rootDir == "" || !filepath.IsAbs(o.rootDir) {
		return usageErrorf("--root-dir must be an absolute path, got %q", o.rootDir)
	}
	o.rootDir = filepath.Clean(o.rootDir)
	if o.rootDir == "/" {
		return usageErrorf("--root-dir must not be /")
	}
	if o.resync < time.Second {
		return usageErrorf("--resync-period must be at least 1s, got %s", o.resync)
	}
	if o.leaseDuration < 4*time.Second {
		return usageErrorf("--lease-duration must be at least 4s, got %s", o.leaseDuration)
	}
	if o.statusInterval < time.Second {
		return usageErrorf("--node-status-interval must be at least 1s, got %s", o.statusInterval)
	}
	if o.syncFrequency < time.Second {
		return usageErrorf("--sync-frequency must be at least 1s, got %s", o.syncFrequency)
	}
	if o.sizeInterval < time.Second {
		return usageErrorf("--emptydir-size-interval must be at least 1s, got %s", o.sizeInterval)
	}
	if o.qps <= 0 || o.burst <= 0 {
		return usageErrorf("--kube-api-qps and --kube-api-burst must be positive")
	}
	switch o.seLinux {
	case "auto":
		o.parsedSELinux = nil
	case "true", "false":
		o.parsedSELinux = ptr.To(o.seLinux == "true")
	default:
		return usageErrorf("--selinux-enabled %q: want auto, true or false", o.seLinux)
	}
	var err error
	if o.parsedTaints, err = nodeagent.ParseTaints(o.taints); err != nil {
		return usageErrorf("--register-with-taints: %v", err)
	}
	if o.bootstrap != "" {
		// The node's kubeconfig may not exist yet: the bootstrap writes it.
		if o.kubeconfig == "" {
			return usageErrorf("--bootstrap-kubeconfig needs --kubeconfig, the file where the node's kubeconfig is kept")
		}
		if o.bootstrap != inClusterBootstrap {
			if _, err := os.Stat(o.bootstrap); err != nil {
				return usageErrorf("--bootstrap-kubeconfig: %v", err)
			}
		}
		return nil
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			return usageErrorf("--kubeconfig: %v", err)
		}
	}
	return nil
}

// inClusterBootstrap as --bootstrap-kubeconfig means the pod's own service-account token.
const inClusterBootstrap = "in-cluster"

// nodeConfig is the node's client config: from --kubeconfig, or obtained and then renewed
// through a CSR when --bootstrap-kubeconfig is set (the kubelet's TLS bootstrap).
func (o *nodeOptions) nodeConfig(ctx context.Context) (*rest.Config, *nodecert.Manager, error) {
	if o.bootstrap == "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		return cfg, nil, err
	}
	var boot *rest.Config
	var err error
	if o.bootstrap == inClusterBootstrap {
		boot, err = rest.InClusterConfig()
	} else {
		boot, err = clientcmd.BuildConfigFromFlags("", o.bootstrap)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--bootstrap-kubeconfig: %w", err)
	}
	boot.UserAgent = "kubevol-node/" + o.nodeName + " bootstrap"
	m := nodecert.New(nodecert.Config{NodeName: o.nodeName, Kubeconfig: o.kubeconfig, CertDir: filepath.Join(o.rootDir, "pki"), Bootstrap: boot})
	cfg, err := m.Ensure(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cfg, m, nil
}

func (o *nodeOptions) run(ctx context.Context) error {
	if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
		return err
	}
	cfg, certs, err := o.nodeConfig(ctx)
	if err != nil {
		return err
	}
	var collectors []prometheus.Collector
	if certs != nil {
		collectors = append(collectors, certs.TTLMetric())
		go certs.Run(ctx)
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	cfg.UserAgent = "kubevol-node/" + o.nodeName
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(nodeagent.Config{
		Client: client, NodeName: o.nodeName, RootDir: o.rootDir, MetricsAddress: o.metricsAddress,
		ResyncPeriod: o.resync, LeaseDuration: o.leaseDuration, StatusInterval: o.statusInterval,
		SizeLimitInterval: o.sizeInterval,
		SyncFrequency:     o.syncFrequency,
		Taints:            o.parsedTaints,
		Collectors:        collectors,
		SELinuxEnabled:    o.parsedSELinux,
	})
	if err != nil {
		return err
	}
	return agent.Run(ctx)
}
