package nodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/cluster/proc"
	"github.com/kubevol/kubevol/internal/component/nodeagent/nodecert"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/pkg/podstatus"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

// libraryFleet embeds one volume manager per node in this process, through the public
// library, as an embedder would: pkg/volumemanager with the in-tree plugins, pkg/podstatus
// for the pods' condition and the end of their deletion, events, and a client of the
// node's own identity. It registers the Node (the embedder's runtime would) but runs no
// heartbeat: what it measures is the volume manager. The pods tolerate every taint, so the
// node lifecycle controller's unreachable taint evicts nothing.
type libraryFleet struct {
	dir       string
	bootstrap *rest.Config

	// run is the managers' context: not the benchmark's, so that they keep tearing
	// volumes down after an interrupt, until stop.
	run    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	before int64 // this process's RSS before the first manager

	mu   sync.Mutex
	errs []error
}

func newLibraryFleet(dir string, bootstrap *rest.Config) *libraryFleet {
	run, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	return &libraryFleet{dir: dir, bootstrap: bootstrap, run: run, cancel: cancel}
}

func (f *libraryFleet) root(node string) string { return filepath.Join(f.dir, node) }

func (f *libraryFleet) start(ctx context.Context, nodes []string, ready func()) error {
	u, err := proc.ReadUsage(os.Getpid())
	if err != nil {
		return err
	}
	f.before = u.RSS
	return report.Parallel(len(nodes), startWorkers, func(i int) error {
		if err := f.startOne(ctx, nodes[i]); err != nil {
			return fmt.Errorf("node %s: %w", nodes[i], err)
		}
		ready()
		return nil
	})
}

func (f *libraryFleet) startOne(ctx context.Context, node string) error {
	root := f.root(node)
	if err := os.MkdirAll(root, 0o750); err != nil {
		return err
	}
	certs := nodecert.New(nodecert.Config{NodeName: node, Kubeconfig: filepath.Join(root, "kubeconfig"),
		CertDir: filepath.Join(root, "pki"), Bootstrap: f.bootstrap})
	// The bootstrap logs at the managers' verbosity, not once per node on the terminal.
	cfg, err := certs.Ensure(klog.NewContext(ctx, klog.FromContext(f.run)))
	if err != nil {
		return err
	}
	// The agent's defaults (--kube-api-qps, --kube-api-burst).
	cfg.QPS, cfg.Burst, cfg.UserAgent = 50, 100, "kubevol-bench-library/"+node
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Without a Node, the pod garbage collector deletes the node's pods as orphans.
	_, err = client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	recorder, startEvents := controller.NewDeferredEventRecorder(v1.EventSource{Component: "kubevol-bench-library", Host: node})
	pods := podstatus.New(client)
	m, err := volumemanager.New(volumemanager.Config{
		Client: client, NodeName: node, Paths: volume.Paths{Root: root},
		Plugins: plugins.All(), Recorder: recorder, Observer: pods,
	})
	if err != nil {
		return err
	}
	run := klog.NewContext(f.run, klog.FromContext(f.run).WithValues("node", node))
	stopEvents := startEvents(client)
	f.wg.Go(func() { pods.Run(run) })
	f.wg.Go(func() {
		defer stopEvents()
		if err := m.Run(run); err != nil && run.Err() == nil {
			f.mu.Lock()
			f.errs = append(f.errs, fmt.Errorf("volume manager of %s: %w", node, err))
			f.mu.Unlock()
		}
	})
	select {
	case <-m.Initialized():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *libraryFleet) usage() (proc.Usage, error) { return proc.ReadUsage(os.Getpid()) }

func (f *libraryFleet) baseRSS() int64 { return f.before }

// fixedWatches: the node's pods.
func (f *libraryFleet) fixedWatches() int { return 1 }

func (f *libraryFleet) stop() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}
