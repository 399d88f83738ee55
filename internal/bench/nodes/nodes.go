// Package nodes is `kubevol bench nodes`: what node agents cost the API server, and
// themselves, as the number of nodes grows. Each run starts one agent per node (as
// `kubevol node` processes, or as volume managers embedded in this process through
// pkg/volumemanager), each with its own node identity; binds pods-per-node pods to every
// node; and measures the API server's CPU, RSS and watches, the agents' idle CPU and RSS,
// the time from binding to mounted, and a ConfigMap update's way to the files of every pod.
// The figures go per node into nodes.csv and nodes.svg, which accumulate runs at several
// node counts.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	benchnode "github.com/kubevol/kubevol/internal/bench/node"
	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/bench/target"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

// How the agents run.
const (
	// AgentsProcess runs each agent as a `kubevol node` process.
	AgentsProcess = "process"
	// AgentsLibrary embeds one volume manager per node in this process.
	AgentsLibrary = "library"
)

// schedulerName makes kube-scheduler ignore the benchmark's pods: the benchmark binds them
// itself, all at once, so that "bound" is a known instant.
const schedulerName = "kubevol-bench-none"

// Config is what the benchmark measures.
type Config struct {
	// Nodes are the node counts, one run each, on the same cluster.
	Nodes       []int
	PodsPerNode int
	// Agents is AgentsProcess or AgentsLibrary.
	Agents string
	// Binary is the kubevol binary the process agents run.
	Binary string
	// Updates is the number of ConfigMap updates whose propagation is measured.
	Updates int
	// Idle is how long the idle API server and agents are measured, before the agents
	// start and with everything mounted.
	Idle time.Duration
	// Kubeconfig of the cluster; empty means the `kubevol up` cluster if it runs, else a
	// throwaway local cluster.
	Kubeconfig string
	OutDir     string
	// Timeout bounds each wait: the agents' start, the mounts, one update.
	Timeout time.Duration
	Out     io.Writer
}

// Run runs the benchmark once per node count, prints the figures, and writes nodes.csv and
// nodes.svg to cfg.OutDir, merged with the rows already there.
func Run(ctx context.Context, cfg Config) error {
	if os.Geteuid() != 0 {
		return errors.New("bench nodes mounts tmpfs volumes: run it as root")
	}
	cluster, err := target.Pick(ctx, cfg.Kubeconfig, cfg.Out)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	admin := *cluster.Config
	admin.QPS, admin.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(&admin)
	if err != nil {
		return err
	}
	if cluster.APIServerPID() == 0 {
		fmt.Fprintln(cfg.Out, "note: the API server does not run on this machine: its CPU and RSS are not measured")
	}
	scaling := &report.Scaling{Group: "run", X: "nodes", Series: Series}
	var runErr error
	for _, n := range cfg.Nodes {
		r := &run{cfg: cfg, nodeCount: n, cs: cs, admin: &admin, api: &apiServer{cs: cs, pid: cluster.APIServerPID}, out: cfg.Out}
		m, err := r.measure(ctx)
		// A run measured to the end keeps its figures when only its clean-up failed.
		if m != nil && m.complete {
			m.write(cfg.Out, cfg.Agents)
			scaling.Upsert(report.ScalingRow{Group: fmt.Sprintf("%s, %d pods/node", cfg.Agents, cfg.PodsPerNode), X: float64(n), Values: m.figures()})
		}
		if err != nil {
			runErr = fmt.Errorf("%d nodes: %w", n, err)
			break
		}
	}
	if len(scaling.Rows) == 0 {
		return runErr
	}
	return errors.Join(runErr, scaling.WriteFiles(cfg.OutDir, "nodes", "kubevol node agents: cost per node against the node count", cfg.Out))
}

// run is one node count's run.
type run struct {
	cfg       Config
	nodeCount int
	cs        kubernetes.Interface
	admin     *rest.Config
	api       *apiServer
	out       io.Writer

	id, ns, dir string
	nodes       []string
	fleet       fleet
	token       localcluster.BootstrapToken
	pods        []*corev1.Pod

	stopWatch context.CancelFunc

	mu      sync.Mutex
	bound   map[types.UID]time.Time
	ready   map[types.UID]time.Time
	readyCh chan struct{}
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func (r *run) nodeName(i int) string { return fmt.Sprintf("bench-nodes-%s-%04d", r.id, i) }

// secretName is the Secret of node i's pods; every pod of every node also projects the
// shared ConfigMap cfg, so each node references two objects.
func secretName(i int) string { return fmt.Sprintf("sec-%04d", i) }

// measure runs the phases in order and cleans up whatever happens.
func (r *run) measure(ctx context.Context) (m *measured, err error) {
	r.id = strings.ToLower(rand.String(5))
	r.ns = "bench-nodes-" + r.id
	for i := range r.nodeCount {
		r.nodes = append(r.nodes, r.nodeName(i))
	}
	r.bound, r.ready, r.readyCh = map[types.UID]time.Time{}, map[types.UID]time.Time{}, make(chan struct{}, 1)
	if r.dir, err = os.MkdirTemp("", "kubevol-bench-nodes-"); err != nil {
		return nil, err
	}
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	fmt.Fprintf(r.out, "\n== %d nodes × %d pods, %s agents (namespace %s, agents in %s) ==\n", r.nodeCount, r.cfg.PodsPerNode, r.cfg.Agents, r.ns, r.dir)
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	m = &measured{nodes: r.nodeCount, podsPerNode: r.cfg.PodsPerNode, expectedWatches: r.fleet.fixedWatches() + 2}
	if m.base0, m.base1, err = r.idleWindow(ctx, "idle cluster"); err != nil {
		return nil, err
	}
	prog := report.NewProgress(r.out, "agents", r.nodeCount)
	var started int
	if err := r.fleet.start(ctx, r.nodes, func() { r.mu.Lock(); started++; prog.Set(started); r.mu.Unlock() }); err != nil {
		return nil, err
	}
	prog.Finish()
	if m.started, err = r.api.snapshot(ctx); err != nil {
		return nil, err
	}
	if err := r.createPods(ctx); err != nil {
		return nil, err
	}
	if m.bound0, err = r.api.snapshot(ctx); err != nil {
		return nil, err
	}
	if m.mounts, err = r.bindAndMount(ctx); err != nil {
		return nil, err
	}
	if m.mounted, err = r.api.snapshot(ctx); err != nil {
		return nil, err
	}
	r.settle(ctx)
	if m.agents0, err = r.fleet.usage(); err != nil {
		return nil, err
	}
	if m.idle0, m.idle1, err = r.idleWindow(ctx, "idle, all mounted"); err != nil {
		return nil, err
	}
	if m.agents1, err = r.fleet.usage(); err != nil {
		return nil, err
	}
	m.agentsBaseRSS, m.load = r.fleet.baseRSS(), loadAverage()
	if r.cfg.Updates > 0 {
		var dirs []string
		for _, p := range r.pods {
			dirs = append(dirs, filepath.Join(r.fleet.root(p.Spec.NodeName), "pods", string(p.UID), "volumes", "kubernetes.io~configmap", "configmap"))
		}
		// The other figures stand without this one.
		prop, err := benchnode.Propagation(ctx, r.cs, r.ns, "cfg", dirs, r.cfg.Updates, r.cfg.Timeout, r.out)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			fmt.Fprintf(r.out, "\nConfigMap propagation not measured: %v\n", err)
		} else {
			m.propagation = prop.Column(0)
		}
	}
	m.complete = true
	return m, nil
}

// setup creates the namespace, the objects the pods reference, the bootstrap token with
// which every agent obtains its node certificate, and the fleet.
func (r *run) setup(ctx context.Context) error {
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"version": "0"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := report.Parallel(r.nodeCount, 32, func(i int) error {
		_, err := r.cs.CoreV1().Secrets(r.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName(i)}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	bootstrap := filepath.Join(r.dir, "bootstrap.kubeconfig")
	var err error
	if r.token, err = localcluster.WriteNodeBootstrapKubeconfig(ctx, r.admin, bootstrap, 2*time.Hour); err != nil {
		return err
	}
	switch r.cfg.Agents {
	case AgentsLibrary:
		boot, err := clientcmd.BuildConfigFromFlags("", bootstrap)
		if err != nil {
			return err
		}
		r.fleet = newLibraryFleet(r.dir, boot)
	default:
		r.fleet = &processFleet{binary: r.cfg.Binary, dir: r.dir, bootstrap: bootstrap, timeout: r.cfg.Timeout}
	}
	return r.watchPods(ctx)
}

// idleWindow is two snapshots of the API server cfg.Idle apart.
func (r *run) idleWindow(ctx context.Context, what string) (a, b apiSnapshot, err error) {
	fmt.Fprintf(r.out, "measuring %s for %s\n", what, r.cfg.Idle)
	if a, err = r.api.snapshot(ctx); err != nil {
		return a, b, err
	}
	select {
	case <-time.After(r.cfg.Idle):
	case <-ctx.Done():
		return a, b, ctx.Err()
	}
	b, err = r.api.snapshot(ctx)
	return a, b, err
}
