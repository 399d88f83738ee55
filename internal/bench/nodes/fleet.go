package nodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/proc"
)

// fleet is the node agents of one run, one per node, each with its own identity
// (system:node:<name>, a certificate it obtains through the bootstrap token) and root
// directory.
type fleet interface {
	// start starts an agent for each node and returns once every one serves its pods;
	// ready is called as each one does.
	start(ctx context.Context, nodes []string, ready func()) error
	// root is the root directory of node's agent.
	root(node string) string
	// usage is the agents' CPU time and RSS so far, summed over the agents.
	usage() (proc.Usage, error)
	// baseRSS is the part of usage's RSS that is not the agents'.
	baseRSS() int64
	// fixedWatches is the watches one agent holds besides one per object its pods reference.
	fixedWatches() int
	// stop stops every agent; the pods must be gone first, so that their volumes are down.
	stop() error
}

// startWorkers is how many agents start at once: each files a CSR, which
// kube-controller-manager approves and signs.
const startWorkers = 16

// processFleet runs each agent as a `kubevol node` process, as a node runs it.
type processFleet struct {
	binary, dir, bootstrap string
	timeout                time.Duration

	mu    sync.Mutex
	procs []*proc.Process
}

func (f *processFleet) root(node string) string { return filepath.Join(f.dir, node) }

func (f *processFleet) start(ctx context.Context, nodes []string, ready func()) error {
	ports, err := localcluster.FreePorts(len(nodes))
	if err != nil {
		return err
	}
	return report.Parallel(len(nodes), startWorkers, func(i int) error {
		node, root := nodes[i], f.root(nodes[i])
		if err := os.MkdirAll(root, 0o750); err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[i])
		p, err := proc.Start("kubevol node "+node, f.binary, []string{"node", "--node-name", node, "--root-dir", root,
			"--kubeconfig", filepath.Join(root, "kubeconfig"), "--bootstrap-kubeconfig", f.bootstrap,
			"--metrics-address", addr}, root+".log")
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.procs = append(f.procs, p)
		f.mu.Unlock()
		// /healthz answers once the volume manager has its pods and its state reconstructed.
		if err := proc.WaitReady(ctx, p, f.timeout, proc.HTTPOK("http://"+addr+"/healthz")); err != nil {
			return fmt.Errorf("agent %s: %w; last log lines (%s):\n%s", node, err, p.LogPath, proc.LogTail(p.LogPath, 10))
		}
		ready()
		return nil
	})
}

func (f *processFleet) usage() (proc.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sum proc.Usage
	for _, p := range f.procs {
		u, err := proc.ReadUsage(p.PID())
		if err != nil {
			return sum, fmt.Errorf("%s: %w", p.Name, err)
		}
		sum.CPU, sum.RSS, sum.PeakRSS = sum.CPU+u.CPU, sum.RSS+u.RSS, sum.PeakRSS+u.PeakRSS
	}
	return sum, nil
}

func (f *processFleet) baseRSS() int64 { return 0 }

// fixedWatches: the node's pods and the CSIDrivers (the CSI plugin's informer).
func (f *processFleet) fixedWatches() int { return 2 }

func (f *processFleet) stop() error {
	f.mu.Lock()
	procs := f.procs
	f.procs = nil
	f.mu.Unlock()
	return proc.StopAll(30*time.Second, procs...)
}
