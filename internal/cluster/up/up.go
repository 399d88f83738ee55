// Package up runs the whole kubevol stack on this machine; `kubevol up` is its command
// line. Start brings up the local control plane (internal/cluster/localcluster), then the kubevol
// components as child processes of the kubevol binary itself, and the cluster objects they
// need (namespace, CSIDriver, default StorageClass, snapshot CRDs and class). It also holds:
//
//   - external drivers: a --driver endpoint is probed, gets its own sidecars and objects,
//     configured by an optional driver config file (DriverConfig);
//   - supervision: a component that exits is restarted with a Backoff, as the kubelet
//     restarts a container, and health-checked;
//   - Reset, which takes down the stack's mounts and loop devices and removes its state
//     directory, and Demo, the demo of `kubevol up --demo`.
package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/cluster/identity"
	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/proc"
	"github.com/kubevol/kubevol/internal/cluster/upstatus"
	"github.com/kubevol/kubevol/internal/component/driver"
)

// Options configure Start.
type Options struct {
	// Dir holds all state: the cluster's, the driver's volumes, the node's pod directories.
	Dir string
	// ClusterBinary is the kubevol-cluster binary; empty builds or finds it.
	ClusterBinary string
	// KubevolBinary runs the components; empty means this executable.
	KubevolBinary string
	// NodeName is the node the agent registers and the driver serves; with Nodes > 1 the
	// first node's, the others are NodeName-2, NodeName-3...
	NodeName string
	// Nodes is how many nodes run on this machine, each its own Node, node agent and node
	// instance of the built-in driver, under one controller; 0 means 1.
	Nodes int
	// Progress receives human-readable progress.
	Progress io.Writer
	// CallLog, if set, makes the driver log every CSI call there (benchmarks, tests).
	CallLog string
	// UnsafeNoFsync runs etcd without fsync: for throwaway benchmark clusters only.
	UnsafeNoFsync bool
	// AttachRequired runs the driver with --attach-required and installs its CSIDriver with
	// attachRequired: true, so volumes go through VolumeAttachments and the attacher.
	AttachRequired bool
	// Drivers are the endpoints of external CSI drivers (unix:///path/csi.sock) to run
	// beside the built-in one: registered, with their CSIDriver, StorageClass and sidecars.
	Drivers []string
	// DriverConfig overrides, by driver name, what up derives from a driver's capabilities.
	DriverConfig map[string]DriverConfig
	// Backoff of restarts of the components that exit; zero means DefaultBackoff.
	Backoff Backoff
	// NodeSyncFrequency is the node agent's --sync-frequency; zero means
	// DefaultNodeSyncFrequency.
	NodeSyncFrequency time.Duration
	// Runtime "containerd" makes the upstream kubelet, on containerd, this machine's node
	// instead of the kubevol node agent; "" runs the node agent.
	Runtime string
	// VolumeManager is the kubelet's volume manager with Runtime "containerd":
	// kubeletnode.VolumeManagerKubevol or VolumeManagerKubelet; "" means
	// DefaultVolumeManager.
	VolumeManager string
	// Images are image archives (OCI layout tarballs) imported into containerd at start.
	Images []string
	// Sidecars are the kubevol sidecars run for the built-in driver, a subset of
	// BuiltinSidecars; nil runs them all. Leaving some out lets other implementations of
	// them (upstream's, in `make conformance`) serve the driver instead.
	Sidecars []string
	// E2EImages also builds and imports the e2e suite's agnhost image (a build of a few
	// minutes, once) and its nginx image (Debian's nginx, downloaded once if not installed).
	E2EImages bool
}

// DefaultNodeSyncFrequency is up's --sync-frequency for its node agent: a development
// cluster's default, not the kubelet's minute. A node may only GET its claims (no watch),
// so it learns that a claim grew by reading it again, every --sync-frequency; with a few
// pods a GET every 5 s per claim costs the API server nothing, and an expansion reaches the
// mount in seconds.
const DefaultNodeSyncFrequency = 5 * time.Second

// Namespace is where the kubevol components keep their namespaced objects (leases, the
// provisioner's intent journal).
const Namespace = "kubevol-system"

// Stack is a running control plane plus kubevol.
type Stack struct {
	opts    Options
	Cluster *localcluster.Cluster

	mu      sync.Mutex
	procs   []*component
	drivers []*externalDriver
	// runtime and nodeProcs (containerd, kubelet) are the node of --runtime containerd.
	runtime   *runtimeNode
	nodeProcs []*component
	cniDir    string

	events    chan string
	failed    chan error
	superStop context.CancelFunc
	superDone chan struct{}
	restarts  map[string]int // control plane components
	logFiles  []*os.File
	// status is <dir>/up-status.json, stopped by Stop.
	status *upstatus.Writer

	// kubeconfigs are the sidecars' ServiceAccount kubeconfigs, by role; their tokens are
	// refreshed until refreshStop.
	kubeconfigs map[string]*identity.Kubeconfig
	refreshCtx  context.Context
	refreshStop context.CancelFunc
}

// Start brings everything up; on error nothing is left running.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.KubevolBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.KubevolBinary = exe
	}
	if o.NodeName == "" {
		return nil, errors.New("up: NodeName is required")
	}
	if err := validateNodes(o); err != nil {
		return nil, err
	}
	for _, r := range o.Sidecars {
		if !slices.Contains(BuiltinSidecars, r) {
			return nil, fmt.Errorf("up: unknown sidecar %q: want some of %s", r, strings.Join(BuiltinSidecars, ", "))
		}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if o.Backoff == (Backoff{}) {
		o.Backoff = DefaultBackoff
	}
	if o.NodeSyncFrequency <= 0 {
		o.NodeSyncFrequency = DefaultNodeSyncFrequency
	}
	// External drivers are asked who they are before anything starts: a wrong --driver
	// fails at once.
	var drivers []*externalDriver
	nodes := (&Stack{opts: o}).Nodes()
	for _, ep := range o.Drivers {
		d, err := probeDriverNodes(ctx, ep, nodes)
		if err != nil {
			closeDrivers(drivers)
			return nil, err
		}
		d.cfg = o.DriverConfig[d.name]
		drivers = append(drivers, d)
	}
	if err := checkDrivers(drivers); err != nil {
		closeDrivers(drivers)
		return nil, err
	}
	for name := range o.DriverConfig {
		if !slices.ContainsFunc(drivers, func(d *externalDriver) bool { return d.name == name }) {
			fmt.Fprintf(o.Progress, "note: --driver-config configures %s, which no --driver serves\n", name)
		}
	}
	// A missing package of the container runtime stops up before anything is written.
	switch o.Runtime {
	case "":
	case RuntimeContainerd:
		if err := kubeletnode.CheckPrerequisites(); err != nil {
			closeDrivers(drivers)
			return nil, err
		}
	default:
		closeDrivers(drivers)
		return nil, fmt.Errorf("up: unknown runtime %q", o.Runtime)
	}
	if marked, err := claimDir(o.Dir); err != nil {
		closeDrivers(drivers)
		return nil, fmt.Errorf("up: state directory: %w", err)
	} else if !marked {
		fmt.Fprintf(o.Progress, "note: %s is not empty and has no %s marker, so `kubevol up --reset` will refuse to wipe it\n", o.Dir, MarkerFile)
	}
	// From here on <dir>/up-status.json says what up is doing, for a kubevol verify that
	// waits for it; its detail is the last progress line.
	status, err := upstatus.Start(o.Dir)
	if err != nil {
		closeDrivers(drivers)
		return nil, fmt.Errorf("up: status file: %w", err)
	}
	o.Progress = io.MultiWriter(o.Progress, status)
	s, err := start(ctx, o, drivers, status)
	if err != nil {
		status.Close(upstatus.Failed, err.Error())
		return nil, err
	}
	s.status = status
	status.Set(upstatus.Ready, "")
	return s, nil
}

// start is Start once the options are checked and the state directory claimed.
func start(ctx context.Context, o Options, drivers []*externalDriver, status *upstatus.Writer) (*Stack, error) {
	var err error
	var cniDir string
	var extraControllers []string
	if o.Runtime == RuntimeContainerd {
		if cniDir, err = localcluster.EnsureCNIPlugins(ctx, o.Progress); err != nil {
			closeDrivers(drivers)
			return nil, err
		}
		extraControllers = localcluster.WorkloadControllers
	}
	building := func(b bool) {
		if b {
			status.Set(upstatus.Building, "")
		} else {
			status.Set(upstatus.Starting, "")
		}
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{Dir: o.Dir, Binary: o.ClusterBinary, Building: building,
		Progress: o.Progress, UnsafeNoFsync: o.UnsafeNoFsync, ExtraControllers: extraControllers})
	if err != nil {
		closeDrivers(drivers)
		return nil, err
	}
	s := &Stack{opts: o, Cluster: cluster, drivers: drivers, events: make(chan string, 64), failed: make(chan error, 1), restarts: map[string]int{}, cniDir: cniDir}
	s.refreshCtx, s.refreshStop = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.startComponents(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	s.startClusterSupervision()
	return s, nil
}

// BuiltinSidecars are the kubevol sidecars of the built-in driver, in their start order.
var BuiltinSidecars = []string{"provisioner", "attacher", "resizer", "snapshotter"}

// sidecars are the BuiltinSidecars that Options.Sidecars selects, in start order.
func (s *Stack) sidecars() []string {
	if s.opts.Sidecars == nil {
		return BuiltinSidecars
	}
	var out []string
	for _, r := range BuiltinSidecars {
		if slices.Contains(s.opts.Sidecars, r) {
			out = append(out, r)
		}
	}
	return out
}

func (s *Stack) path(elem ...string) string {
	return filepath.Join(append([]string{s.opts.Dir}, elem...)...)
}

func (s *Stack) startComponents(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(s.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	if err := installObjects(ctx, cs, s.opts.AttachRequired); err != nil {
		return fmt.Errorf("install kubevol objects: %w", err)
	}
	wh, err := s.startConversionWebhook(ctx)
	if err != nil {
		return err
	}
	if err := installSnapshotObjects(ctx, s.Cluster.RESTConfig(), wh); err != nil {
		return fmt.Errorf("install snapshot CRDs and class: %w", err)
	}
	for _, d := range []string{s.path("csi"), s.path("driver"), s.path("node")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	nodes := s.Nodes()
	for _, n := range nodes {
		for _, d := range []string{n.RootDir, n.DriverStateDir} {
			if err := os.MkdirAll(d, 0o750); err != nil {
				return err
			}
		}
	}
	// The node agents run as system:node:<name>, each with a certificate it obtains through
	// a CSR that kube-controller-manager approves for this bootstrap token (docs/node.md).
	bootstrap := s.path("node-bootstrap.kubeconfig")
	if err := s.Cluster.WriteNodeBootstrapKubeconfig(ctx, bootstrap, time.Hour); err != nil {
		return err
	}
	// Each sidecar runs as its own ServiceAccount, bound to the RBAC deploy/ ships.
	kubeconfig := map[string]string{}
	for _, role := range s.sidecars() {
		if kubeconfig[role], err = s.sidecarKubeconfig(ctx, cs, role); err != nil {
			return err
		}
	}
	// The first node's driver process serves the controller too.
	socket := nodes[0].socket
	var rn *runtimeNode
	if s.opts.Runtime == RuntimeContainerd {
		if rn, err = s.newRuntimeNode(); err != nil {
			return err
		}
		s.mu.Lock()
		s.runtime = rn
		s.mu.Unlock()
		nodes[0].RootDir = filepath.Dir(rn.node.PluginsRegistry())
	}
	ports, err := localcluster.FreePorts(2*len(nodes) + 4)
	if err != nil {
		return err
	}
	steps := s.driverSteps(nodes, ports)
	ports = ports[len(nodes):]
	// "snapshotter" has both roles: the cluster's snapshot-controller and this driver's
	// csi-snapshotter.
	for i, role := range s.sidecars() {
		steps = append(steps, step{role, ports[i], s.sidecarArgs(role, socket, kubeconfig[role])})
	}
	if rn == nil { // else the kubelet is the node
		steps = append(steps, s.nodeSteps(nodes, bootstrap, ports[4:])...)
	}
	for _, st := range steps {
		addr := "127.0.0.1:" + strconv.Itoa(st.port)
		flag := "--http-endpoint"
		if st.args[0] == "node" {
			flag = "--metrics-address"
		}
		args := append(st.args, flag, addr)
		c := newComponent("kubevol "+st.name, s.opts.KubevolBinary, args, s.Cluster.LogPath("kubevol-"+st.name), "http://"+addr+"/healthz")
		if err := s.startComponent(ctx, c, &s.procs); err != nil {
			return err
		}
	}
	if rn != nil {
		if err := s.startRuntimeNode(ctx, cs, rn); err != nil {
			return err
		}
	}
	return s.startDrivers(ctx, cs)
}

// startComponent starts c, adds it to list (for Stop, even if it never becomes healthy),
// waits until it is healthy, and supervises it from then on.
func (s *Stack) startComponent(ctx context.Context, c *component, list *[]*component) error {
	if err := c.start(); err != nil {
		return err
	}
	s.mu.Lock()
	*list = append(*list, c)
	s.mu.Unlock()
	p := c.current()
	if err := proc.WaitReady(ctx, p, time.Minute, c.probe); err != nil {
		return fmt.Errorf("%s: %w; last log lines (%s):\n%s", c.name, err, p.LogPath, proc.LogTail(p.LogPath, 15))
	}
	go c.supervise(s.opts.Backoff, s.report)
	fmt.Fprintf(s.opts.Progress, "%s ready\n", c.name)
	return nil
}

// Stop stops the sidecars of the external drivers and the kubevol components (the last
// started first), then up's registrations of external drivers, then the control plane.
// External drivers keep running.
func (s *Stack) Stop() error {
	if s.superStop != nil {
		s.superStop()
		<-s.superDone
	}
	if s.refreshStop != nil {
		s.refreshStop()
	}
	// The kubelet node goes first: its pods use the driver.
	runtimeErr := s.stopRuntime()
	s.mu.Lock()
	procs := s.procs
	drivers := s.drivers
	for _, d := range drivers {
		procs = append(procs, d.sidecars...)
	}
	s.procs, s.drivers = nil, nil
	s.mu.Unlock()
	errs := []error{runtimeErr}
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].stop(30*time.Second))
	}
	for _, d := range drivers {
		d.stopRegistration()
	}
	for _, f := range s.logFiles {
		_ = f.Close()
	}
	errs = append(errs, s.Cluster.Stop())
	if s.status != nil {
		s.status.Close(upstatus.Stopped, "")
	}
	return errors.Join(errs...)
}

// Status is the control plane's status followed by the components', each external driver
// followed by its sidecars.
func (s *Stack) Status(ctx context.Context) []localcluster.ComponentStatus {
	out := s.Cluster.Status(ctx)
	var probes []func(context.Context) localcluster.ComponentStatus
	s.mu.Lock()
	for i := range out {
		out[i].Restarts = s.restarts[out[i].Name]
	}
	for _, c := range append(slices.Clone(s.procs), s.nodeProcs...) {
		probes = append(probes, c.status)
	}
	for _, d := range s.drivers {
		probes = append(probes, d.status)
		for _, c := range d.sidecars {
			probes = append(probes, c.status)
		}
	}
	s.mu.Unlock()
	for _, probe := range probes {
		out = append(out, probe(ctx))
	}
	return out
}

// LogPath is the log file of a component (cluster component names, or "kubevol <name>").
func (s *Stack) LogPath(name string) string {
	if n, ok := strings.CutPrefix(name, "kubevol "); ok {
		return s.Cluster.LogPath("kubevol-" + n)
	}
	return s.Cluster.LogPath(name)
}

// DriverName is the CSI driver `kubevol up` runs.
const DriverName = driver.DefaultDriverName
