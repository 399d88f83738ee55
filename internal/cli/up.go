package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/up"
	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/version"
)

type upOptions struct {
	dir            string
	reset          bool
	demo           bool
	clusterBinary  string
	statusInterval time.Duration
	buildOnly      bool
	nodeName       string
	nodes          int
	drivers        []string
	driverConfig   string
	driverCfg      map[string]up.DriverConfig
	syncFrequency  time.Duration
	backoffMax     time.Duration
	runtime        string
	volumeManager  string
	images         []string
	e2eImages      bool
	sidecars       []string
}

func newUpCommand() *cobra.Command {
	o := upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local single-node cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) with the kubevol components",
		Long: `up starts a real single-node Kubernetes control plane on loopback, built from upstream
Kubernetes ` + localcluster.UpstreamVersion + ` (built once, on first run), then the kubevol components (driver,
provisioner, attacher, resizer, snapshotter and node agent) with a default StorageClass "` + up.DefaultStorageClass + `".
State is kept in --dir, so a second start is fast and keeps its objects; --reset wipes it.

--driver unix:///path/csi.sock (repeatable) adds a CSI driver that runs on its own: up asks it
who it is (GetPluginInfo, capabilities, NodeGetInfo), registers it with the node agent as
node-driver-registrar would (unless it registers itself in <dir>/node/plugins_registry),
creates its CSIDriver (attachRequired from PUBLISH_UNPUBLISH_VOLUME, storageCapacity from
GET_CAPACITY; --driver-config overrides) and a StorageClass named after it, and runs its
provisioner, attacher (when attach is required) and resizer (when it can expand). With
--nodes N, an endpoint with {node} (unix:///run/my/{node}.sock) is one node instance of the
driver per node, each registered with its own node; the first node's also serves the sidecars.

A component that exits is restarted with backoff (1 s doubling to 5 min, back to 1 s after
10 min of running); up stops only when etcd or the kube-apiserver cannot be brought back.
Ctrl-C or SIGTERM stops everything up started; external drivers keep running.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "/var/lib/kubevol/up", "state directory: certificates, etcd data, kubeconfig, logs")
	f.BoolVar(&o.reset, "reset", false, "wipe the state directory before starting")
	f.BoolVar(&o.demo, "demo", false, "also apply examples/ (StorageClass, PVC, a pod with PVC, configMap, secret, emptyDir and inline CSI volumes), show where each volume is mounted and that PVC data survives recreating the pod")
	f.StringVar(&o.clusterBinary, "cluster-binary", "", "the control plane's kubevol-cluster binary, of this kubevol's release (default: $"+localcluster.BinaryEnv+" as is, else the kubevol-cluster beside this kubevol, as a release archive ships it, else built from this source tree)")
	f.DurationVar(&o.statusInterval, "status-interval", 2*time.Second, "how often the live status is refreshed")
	f.StringVar(&o.nodeName, "node-name", defaultNodeName(), "name of this machine's Node, served by the kubevol node agent and driver")
	f.IntVar(&o.nodes, "nodes", 1, "how many nodes to run on this machine, each its own Node (<node-name>, <node-name>-2, ...) with its own node agent, root directory, plugin registry and node instance of the built-in driver (topology segment "+driver.TopologyKey+"=<node>), under one controller; external --drivers register on the first node only")
	f.StringArrayVar(&o.drivers, "driver", nil, "endpoint of an external CSI driver to run beside the built-in one, unix:///path/csi.sock (repeatable)")
	f.StringVar(&o.driverConfig, "driver-config", "", "YAML file keyed by driver name overriding what --driver derives: attachRequired, storageCapacity, podInfoOnMount, requiresRepublish, fsGroupPolicy, volumeLifecycleModes, storageClass.{volumeBindingMode,parameters}")
	f.DurationVar(&o.syncFrequency, "node-sync-frequency", up.DefaultNodeSyncFrequency, "the node agent's --sync-frequency: how often it reads the claims of running pods again (so how soon an expansion reaches the mount) and republishes requiresRepublish volumes; the kubelet's default is 1m")
	f.DurationVar(&o.backoffMax, "restart-backoff-max", up.DefaultBackoff.Max, "longest wait before a component that exited is restarted (the wait starts at 1s and doubles)")
	f.StringVar(&o.runtime, "runtime", "", `"containerd": the node is the upstream kubelet `+localcluster.UpstreamVersion+` on containerd and runc (Debian packages; hack/install-runtime-deps.sh), pods run in containers on a CNI bridge that never leaves this machine; empty: the kubevol node agent, no containers`)
	f.StringVar(&o.volumeManager, "volume-manager", up.DefaultVolumeManager, `with --runtime containerd: the kubelet's volume manager, "kubevol" (kubevol's pkg/volumemanager, linked into the same kubelet binary) or "kubelet" (its own)`)
	f.StringArrayVar(&o.images, "image", nil, "with --runtime containerd: an image archive (OCI layout or docker-archive tarball) to import at start (repeatable)")
	f.BoolVar(&o.e2eImages, "e2e-images", false, "with --runtime containerd: also build and import the e2e suite's agnhost image, its nginx image (of Debian's nginx package) and its glibc-dns-testing image (busybox with Debian's dash, coreutils and glibc's getent; busybox and the sandbox image are always there)")
	f.StringSliceVar(&o.sidecars, "sidecars", up.BuiltinSidecars, "the kubevol sidecars to run for the built-in driver (some of "+strings.Join(up.BuiltinSidecars, ",")+"; snapshotter is both the snapshot-controller and the csi-snapshotter); leave one out to run another implementation of it against the driver, as make conformance runs upstream's provisioner and snapshotter")
	f.BoolVar(&o.buildOnly, "build-only", false, "build the control-plane binary if it is missing, print its path and exit")
	return cmd
}

func (o *upOptions) validate() error {
	if o.dir == "" {
		return usageErrorf("--dir must not be empty")
	}
	if o.statusInterval < 100*time.Millisecond {
		return usageErrorf("--status-interval must be at least 100ms, got %s", o.statusInterval)
	}
	if o.backoffMax < time.Second {
		return usageErrorf("--restart-backoff-max must be at least 1s, got %s", o.backoffMax)
	}
	if o.syncFrequency < time.Second {
		return usageErrorf("--node-sync-frequency must be at least 1s, got %s", o.syncFrequency)
	}
	if errs := validation.IsDNS1123Subdomain(o.nodeName); len(errs) > 0 {
		return usageErrorf("--node-name %q: %s", o.nodeName, strings.Join(errs, "; "))
	}
	abs, err := filepath.Abs(o.dir)
	if err != nil {
		return usageErrorf("--dir: %v", err)
	}
	if o.reset && abs == "/" {
		return usageErrorf("--reset refuses to wipe %q", abs)
	}
	o.dir = abs
	if o.runtime != "" && o.runtime != up.RuntimeContainerd {
		return usageErrorf("--runtime %q: want %q or empty", o.runtime, up.RuntimeContainerd)
	}
	for _, r := range o.sidecars {
		if !slices.Contains(up.BuiltinSidecars, r) {
			return usageErrorf("--sidecars: unknown sidecar %q: want some of %s", r, strings.Join(up.BuiltinSidecars, ","))
		}
	}
	if o.nodes < 1 {
		return usageErrorf("--nodes %d: want at least 1", o.nodes)
	}
	if o.nodes > 1 && o.runtime != "" {
		return usageErrorf("--nodes %d needs the kubevol node agent: --runtime %s runs one kubelet", o.nodes, o.runtime)
	}
	switch o.volumeManager {
	case kubeletnode.VolumeManagerKubevol, kubeletnode.VolumeManagerKubelet:
	default:
		return usageErrorf("--volume-manager %q: want %s or %s", o.volumeManager, kubeletnode.VolumeManagerKubevol, kubeletnode.VolumeManagerKubelet)
	}
	if o.volumeManager != up.DefaultVolumeManager && o.runtime == "" {
		return usageErrorf("--volume-manager needs --runtime %s: the kubevol node agent is kubevol's volume manager", up.RuntimeContainerd)
	}
	if (len(o.images) > 0 || o.e2eImages) && o.runtime == "" {
		return usageErrorf("--image and --e2e-images need --runtime %s", up.RuntimeContainerd)
	}
	for _, d := range o.drivers {
		target, err := csiclient.Target(d)
		if err != nil || !filepath.IsAbs(strings.TrimPrefix(target, "unix://")) {
			return usageErrorf("--driver %q: want unix:///path/csi.sock", d)
		}
	}
	if o.driverConfig != "" {
		if o.driverCfg, err = up.LoadDriverConfig(o.driverConfig); err != nil {
			return usageErrorf("--driver-config: %v", err)
		}
	}
	return nil
}

func (o *upOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.clusterBinary != "" {
		// A wrong path or another release's binary stops up before anything starts.
		if _, err := localcluster.CheckBinary(ctx, o.clusterBinary, version.Get()); err != nil {
			return usageErrorf("--cluster-binary %v", err)
		}
	}
	if o.buildOnly {
		bin := o.clusterBinary
		if bin == "" {
			var err error
			if bin, err = localcluster.EnsureBinary(ctx, stderr); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintln(stdout, bin)
		return err
	}
	if o.reset {
		if err := up.Reset(o.dir); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wiped %s\n", o.dir)
	}
	start := time.Now()
	stack, err := up.Start(ctx, up.Options{Dir: o.dir, ClusterBinary: o.clusterBinary, NodeName: o.nodeName, Nodes: o.nodes, Progress: stderr,
		Drivers: o.drivers, DriverConfig: o.driverCfg, NodeSyncFrequency: o.syncFrequency,
		Backoff: up.Backoff{Initial: up.DefaultBackoff.Initial, Max: o.backoffMax, ResetAfter: up.DefaultBackoff.ResetAfter},
		Runtime: o.runtime, VolumeManager: o.volumeManager, Images: o.images, E2EImages: o.e2eImages, Sidecars: o.sidecars})
	var driverErr *up.DriverError
	var missing *kubeletnode.MissingError
	if errors.As(err, &driverErr) || errors.As(err, &missing) {
		return &UsageError{Err: err}
	}
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stderr, "\nstopping…")
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(stderr, "stop: %v\n", err)
		} else {
			fmt.Fprintln(stderr, "stopped; state kept in "+o.dir)
		}
	}()
	fmt.Fprintf(stderr, "cluster ready in %s; logs in %s\n", time.Since(start).Round(100*time.Millisecond), filepath.Join(o.dir, "logs"))
	fmt.Fprintf(stdout, "kubectl --kubeconfig %s get nodes\n", stack.Cluster.KubeconfigPath())
	if o.demo {
		if err := stack.Demo(ctx, stdout); err != nil {
			return err
		}
	}

	tty := isTerminal(stderr)
	ticker := time.NewTicker(o.statusInterval)
	defer ticker.Stop()
	// The status probes each component's health endpoint, which takes seconds to time out
	// while the API server is down: it runs beside the loop, so that an exit or a restart
	// is printed when it happens, not after the probes of a status line.
	statuses := make(chan string, 1)
	probing := false
	probeCtx, endProbes := context.WithCancel(ctx)
	defer endProbes() // before the stack stops
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-stack.Failed():
			return err
		case ev := <-stack.Events():
			if tty {
				fmt.Fprint(stderr, "\r\033[K")
			}
			fmt.Fprintln(stderr, time.Now().Format(time.TimeOnly)+" "+ev)
			last = ""
		case <-ticker.C:
			if !probing {
				probing = true
				go func() { statuses <- statusLine(stack.Status(probeCtx), time.Since(start)) }()
			}
		case line := <-statuses:
			probing = false
			switch {
			case tty:
				fmt.Fprintf(stderr, "\r\033[K%s", line)
			case stripUptime(line) != stripUptime(last):
				fmt.Fprintln(stderr, line)
			}
			last = line
		}
	}
}

// statusLine renders one compact line, e.g. "etcd ✓  kube-apiserver ✓  ...  up 3m2s".
func statusLine(st []localcluster.ComponentStatus, uptime time.Duration) string {
	var b strings.Builder
	for _, s := range st {
		mark := "✓"
		if !s.Healthy {
			mark = "✗ (" + truncate(s.Detail, 60) + ")"
		}
		switch s.Restarts {
		case 0:
		case 1:
			mark += " (1 restart)"
		default:
			mark += fmt.Sprintf(" (%d restarts)", s.Restarts)
		}
		fmt.Fprintf(&b, "%s %s  ", s.Name, mark)
	}
	fmt.Fprintf(&b, "| up %s", uptime.Round(time.Second))
	return b.String()
}

func stripUptime(line string) string {
	if i := strings.LastIndex(line, "| up "); i >= 0 {
		return line[:i]
	}
	return line
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// defaultNodeName is the host name, lowercased, as the kubelet names its Node.
func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "kubevol-node"
	}
	return strings.ToLower(h)
}
