// Package snapshot is `kubevol bench snapshot`: it creates N VolumeSnapshots of one claim and
// measures the time from each VolumeSnapshot's creation to readyToUse (the snapshot-controller,
// the csi-snapshotter and the driver together), and the throughput.
package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/bench/target"
	"github.com/kubevol/kubevol/internal/cluster/up"
)

// Config is what one run measures.
type Config struct {
	Count int
	// Kubeconfig of a cluster running kubevol (driver, provisioner, snapshotter); empty means
	// the `kubevol up` cluster if one runs, else a throwaway `kubevol up` stack.
	Kubeconfig string
	// Binary is the kubevol executable for a throwaway stack.
	Binary  string
	OutDir  string
	Timeout time.Duration
	Out     io.Writer
	// Group measures VolumeGroupSnapshots of Members claims instead of VolumeSnapshots of one.
	Group   bool
	Members int
}

// Run runs the benchmark and prints its figures to cfg.Out.
func Run(ctx context.Context, cfg Config) error {
	out := cfg.Out
	restCfg, stop, err := pickCluster(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	restCfg.QPS, restCfg.Burst = -1, 0 // the benchmark client must not be the bottleneck
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	jsonCfg := rest.CopyConfig(restCfg)
	jsonCfg.ContentType, jsonCfg.AcceptContentTypes = "application/json", "application/json"
	snap, err := snapclient.NewForConfig(jsonCfg)
	if err != nil {
		return err
	}
	ns := "bench-snapshot-" + rand.String(5)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()
	// An Immediate class of the kubevol driver, so the source claim binds without a pod.
	immediate := storagev1.VolumeBindingImmediate
	sc, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ns},
		Provisioner: up.DriverName, VolumeBindingMode: &immediate, Parameters: map[string]string{"type": "dir"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer func() {
		_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	}()
	sources := 1
	if cfg.Group {
		sources = cfg.Members
	}
	if err := createSources(ctx, cs, ns, sc.Name, sources); err != nil {
		return err
	}
	defer func() {
		_ = cs.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	}()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return bound == sources, nil
	})
	if err != nil {
		return fmt.Errorf("source claims not bound (is kubevol provisioner running?): %w", err)
	}
	kind := kindOf(cfg.Group)

	var mu sync.Mutex
	created, ready := map[string]time.Time{}, map[string]time.Time{}
	progress := report.NewProgress(out, "ready", cfg.Count)
	factory := snapinformers.NewSharedInformerFactoryWithOptions(snap, 0, snapinformers.WithNamespace(ns))
	onReady := func(obj any) {
		name, isReady := readyOf(obj)
		if !isReady {
			return
		}
		now := time.Now()
		mu.Lock()
		if _, ok := ready[name]; !ok {
			ready[name] = now
			progress.Set(len(ready))
		}
		mu.Unlock()
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: onReady, UpdateFunc: func(_, o any) { onReady(o) }}
	if cfg.Group {
		_, _ = factory.Groupsnapshot().V1().VolumeGroupSnapshots().Informer().AddEventHandler(handler)
	} else {
		_, _ = factory.Snapshot().V1().VolumeSnapshots().Informer().AddEventHandler(handler)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	defer factory.Shutdown()

	fmt.Fprintf(out, "creating %d %ss of %d claim(s) in namespace %s\n", cfg.Count, kind.object, sources, ns)
	start := time.Now()
	if err := kind.create(ctx, snap, ns, cfg.Count, func(name string, at time.Time) {
		mu.Lock()
		created[name] = at
		mu.Unlock()
	}); err != nil {
		return err
	}
	createDur := time.Since(start)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(ready) >= cfg.Count, nil
	})
	progress.Finish()
	mu.Lock()
	run := &report.Run{Series: []string{kind.series}}
	var last time.Duration
	for name, at := range created {
		lat := time.Duration(-1)
		if r, ok := ready[name]; ok {
			lat = r.Sub(at)
			last = max(last, r.Sub(start))
		}
		run.Samples = append(run.Samples, report.Sample{Name: name, Start: at.Sub(start), Values: []time.Duration{lat}})
	}
	nReady := len(ready)
	mu.Unlock()
	if err != nil {
		fmt.Fprintf(out, "timed out: %d of %d ready\n", nReady, cfg.Count)
	}
	fmt.Fprintf(out, "\n%ss created in %s (%.0f/s)\n", kind.object, report.Round(createDur), float64(cfg.Count)/createDur.Seconds())
	fmt.Fprintf(out, "all %d ready after %s: %.1f %ss/s\n", nReady, report.Round(last), float64(nReady)/last.Seconds(), kind.object)
	run.WriteTable(out)
	if err := run.WriteFiles(cfg.OutDir, kind.file, fmt.Sprintf("kubevol snapshot: %d %ss of %d claim(s), latency to readyToUse", cfg.Count, kind.object, sources), out); err != nil {
		return err
	}
	fmt.Fprintln(out, "cleaning up")
	delStart := time.Now()
	if err := kind.deleteAll(ctx, snap, ns); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cfg.Timeout, true, func(ctx context.Context) (bool, error) {
		n, err := kind.count(ctx, snap, ns)
		return err == nil && n == 0, nil
	})
	if err != nil {
		return fmt.Errorf("snapshots not deleted: %w", err)
	}
	fmt.Fprintf(out, "cleanup (snapshots, contents and backend snapshots deleted) took %s\n", report.Round(time.Since(delStart)))
	return nil
}

func createSnapshots(ctx context.Context, snap snapclient.Interface, ns string, n int, created func(string, time.Time)) error {
	source := "source"
	return report.Parallel(n, 32, func(i int) error {
		name := fmt.Sprintf("snap-%05d", i)
		at := time.Now()
		vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &source}}}
		if _, err := snap.SnapshotV1().VolumeSnapshots(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
			return err
		}
		created(name, at)
		return nil
	})
}

// pickCluster uses the cluster of cfg.Kubeconfig or of `kubevol up`, else starts a
// throwaway `kubevol up` stack (control plane, driver, provisioner, snapshotter, node).
func pickCluster(ctx context.Context, cfg Config) (*rest.Config, func(), error) {
	kc := cfg.Kubeconfig
	if kc == "" {
		if _, err := os.Stat(target.UpKubeconfig); err == nil {
			kc = target.UpKubeconfig
		}
	}
	if kc != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kc)
		return c, func() {}, err
	}
	dir, err := os.MkdirTemp("", "kubevol-bench-snapshot-")
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	fmt.Fprintln(cfg.Out, "starting a throwaway kubevol up stack for the benchmark")
	s, err := up.Start(ctx, up.Options{Dir: dir, KubevolBinary: cfg.Binary, NodeName: nodeName(host), Progress: cfg.Out, UnsafeNoFsync: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s.Cluster.RESTConfig(), func() { _ = s.Stop(); os.RemoveAll(dir) }, nil
}

func nodeName(host string) string {
	if host == "" {
		return "bench-node"
	}
	return host
}
