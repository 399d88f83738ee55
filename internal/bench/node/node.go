// Package node is `kubevol bench node`: the node agent's time from pod binding to all
// volumes mounted, ConfigMap update propagation, and idle CPU with the pods mounted. The
// agent runs in this process (it needs root, as the real one) against a cluster, with its
// own Node that no other pod can land on.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/bench/target"
	"github.com/kubevol/kubevol/internal/component/nodeagent"
	"github.com/kubevol/kubevol/internal/kubecheck"
)

// schedulerName makes kube-scheduler ignore the benchmark's pods: the benchmark binds them
// itself, all at once, so that "bound" is a known instant.
const schedulerName = "kubevol-bench-none"

// VolumeKinds are the volume types a pod gets, in order, cycling when Volumes exceeds them.
var VolumeKinds = []string{"configmap", "secret", "emptydir", "downwardapi", "projected"}

// Config is what one run measures.
type Config struct {
	Pods    int
	Volumes int
	// Updates is the number of ConfigMap updates whose propagation is measured.
	Updates int
	// Idle is how long the idle CPU is measured.
	Idle time.Duration
	// Kubeconfig of the cluster; empty means the `kubevol up` cluster if it runs, else a
	// throwaway local cluster.
	Kubeconfig string
	OutDir     string
	Timeout    time.Duration
	Out        io.Writer
	// Unrelated, if not zero, measures the agent process's start-up and peak RSS on the
	// empty cluster and again with this many Secrets and as many ConfigMaps (1 KiB each)
	// that no pod of the node references.
	Unrelated int
}

// Run runs the benchmark and prints its figures to cfg.Out.
func Run(ctx context.Context, cfg Config) (err error) {
	out := cfg.Out
	if os.Geteuid() != 0 {
		return errors.New("bench node mounts tmpfs volumes: run it as root")
	}
	cluster, err := target.Pick(ctx, cfg.Kubeconfig, out)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	restCfg := cluster.Config
	restCfg.QPS, restCfg.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, cs: cs, out: out, id: strings.ToLower(rand.String(5)), cluster: cluster}
	b.agentClient = cs
	b.node = "bench-node-" + b.id
	b.ns = "bench-node-" + b.id
	if b.root, err = os.MkdirTemp("", "kubevol-bench-node-"); err != nil {
		return err
	}
	defer func() {
		if cerr := b.cleanup(); err == nil {
			err = cerr
		}
	}()
	if b.cluster.NodeKubeconfig != nil {
		// The agent runs as its node, as a real one would.
		if b.agentClient, err = nodeClient(b.cluster, "bench-node-"+b.id); err != nil {
			return err
		}
	}
	if err := b.setup(ctx); err != nil {
		return err
	}
	footprints, err := b.measureFootprints(ctx)
	if err != nil {
		return err
	}
	mounts, err := b.measureMounts(ctx)
	if err != nil {
		return err
	}
	prop, err := b.measurePropagation(ctx)
	if err != nil {
		return err
	}
	idle := b.measureIdle(ctx)

	fmt.Fprintf(out, "\n%d pods × %d volumes (%s)\n", cfg.Pods, cfg.Volumes, strings.Join(kinds(cfg.Volumes), ", "))
	mounts.WriteTable(out)
	fmt.Fprintf(out, "all mounted: %s after the first binding, %s after the last\n",
		report.Round(b.allMountedFromFirst), report.Round(b.allMountedFromLast))
	if prop != nil {
		prop.WriteTable(out)
	}
	fmt.Fprintf(out, "idle CPU of the agent with %d pods mounted: %.2f%% of a core over %s\n", cfg.Pods, idle, cfg.Idle)
	writeFootprints(out, footprints)
	if err := mounts.WriteFiles(cfg.OutDir, "node-mount", fmt.Sprintf("kubevol node: pod bound → all %d volumes mounted (%d pods)", cfg.Volumes, cfg.Pods), out); err != nil {
		return err
	}
	if prop != nil {
		return prop.WriteFiles(cfg.OutDir, "node-propagation", fmt.Sprintf("kubevol node: ConfigMap update → files of %d pods", cfg.Pods), out)
	}
	return nil
}

func kinds(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = VolumeKinds[i%len(VolumeKinds)]
	}
	return out
}

type bench struct {
	cfg Config
	cs  kubernetes.Interface
	// agentClient is the in-process agent's: a node credential when the benchmark holds
	// the cluster's CA.
	agentClient kubernetes.Interface
	cluster     *target.Cluster
	// extraNodes and extraNamespaces are the footprint phase's, deleted at the end.
	extraNodes      []string
	extraNamespaces []string
	out             io.Writer
	id              string
	node            string
	ns              string
	root            string

	agentCancel context.CancelFunc
	agentDone   chan error

	mu       sync.Mutex
	bound    map[types.UID]time.Time
	ready    map[types.UID]time.Time
	readyCh  chan struct{}
	pods     []*corev1.Pod
	runStart time.Time

	allMountedFromFirst, allMountedFromLast time.Duration
}

func (b *bench) setup(ctx context.Context) error {
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := b.cs.CoreV1().ConfigMaps(b.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"version": "0"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := b.cs.CoreV1().Secrets(b.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	b.bound, b.ready, b.readyCh = map[types.UID]time.Time{}, map[types.UID]time.Time{}, make(chan struct{}, 1)
	agent, err := nodeagent.New(nodeagent.Config{
		Client: b.agentClient, NodeName: b.node, RootDir: b.root,
		OnVolumesReady: func(pod *corev1.Pod, at time.Time) {
			b.mu.Lock()
			if _, ok := b.ready[pod.UID]; !ok {
				b.ready[pod.UID] = at
			}
			b.mu.Unlock()
			select {
			case b.readyCh <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	b.agentCancel, b.agentDone = cancel, make(chan error, 1)
	go func() { b.agentDone <- agent.Run(actx) }()
	select {
	case <-agent.Manager().Initialized():
	case err := <-b.agentDone:
		return fmt.Errorf("agent: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (b *bench) podSpec(i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%05d", i), Labels: map[string]string{"bench": b.id}},
		Spec: corev1.PodSpec{
			SchedulerName:                schedulerName,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	for j, kind := range kinds(b.cfg.Volumes) {
		name := fmt.Sprintf("%s-%d", kind, j)
		var src corev1.VolumeSource
		switch kind {
		case "configmap":
			src.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}
		case "secret":
			src.Secret = &corev1.SecretVolumeSource{SecretName: "sec"}
		case "emptydir":
			src.EmptyDir = &corev1.EmptyDirVolumeSource{}
		case "downwardapi":
			src.DownwardAPI = &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}
		case "projected":
			src.Projected = &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
			}}
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/v/" + name})
	}
	return p
}

// measureMounts creates the pods unscheduled, binds them all, and records per pod the
// time from its binding to the agent reporting every volume mounted.
func (b *bench) measureMounts(ctx context.Context) (*report.Run, error) {
	n := b.cfg.Pods
	created := make([]*corev1.Pod, n)
	prog := report.NewProgress(b.out, "creating pods", n)
	if err := parallel(ctx, n, 32, func(i int) error {
		p, err := b.cs.CoreV1().Pods(b.ns).Create(ctx, b.podSpec(i), metav1.CreateOptions{})
		created[i] = p
		prog.Set(b.count(&created))
		return err
	}); err != nil {
		return nil, err
	}
	prog.Finish()
	b.pods = created
	b.runStart = time.Now()
	prog = report.NewProgress(b.out, "binding and mounting", n)
	err := BindAll(ctx, b.cs, created, func(int) string { return b.node },
		func(i int, at time.Time) { b.mu.Lock(); b.bound[created[i].UID] = at; b.mu.Unlock() },
		func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.ready) }, b.readyCh, b.cfg.Timeout, prog)
	if err != nil {
		return nil, err
	}
	run := &report.Run{Series: []string{"bound_to_mounted"}}
	b.mu.Lock()
	defer b.mu.Unlock()
	var firstBind, lastBind, lastReady time.Time
	for _, p := range created {
		bt, rt := b.bound[p.UID], b.ready[p.UID]
		if firstBind.IsZero() || bt.Before(firstBind) {
			firstBind = bt
		}
		if bt.After(lastBind) {
			lastBind = bt
		}
		if rt.After(lastReady) {
			lastReady = rt
		}
		// The agent can see a binding before the Bind call returns: clamp at zero.
		run.Samples = append(run.Samples, report.Sample{Name: p.Name, Start: bt.Sub(b.runStart), Values: []time.Duration{max(rt.Sub(bt), 0)}})
	}
	b.allMountedFromFirst, b.allMountedFromLast = lastReady.Sub(firstBind), max(lastReady.Sub(lastBind), 0)
	return run, nil
}

func (b *bench) count(created *[]*corev1.Pod) int {
	n := 0
	for _, p := range *created {
		if p != nil {
			n++
		}
	}
	return n
}

// measurePropagation updates the ConfigMap and times, for every pod, when its configMap
// volume shows the new version.
func (b *bench) measurePropagation(ctx context.Context) (*report.Run, error) {
	if b.cfg.Updates == 0 || b.cfg.Volumes < 1 {
		return nil, nil
	}
	var dirs []string
	for _, p := range b.pods {
		dirs = append(dirs, filepath.Join(b.root, "pods", string(p.UID), "volumes", "kubernetes.io~configmap", "configmap-0"))
	}
	return Propagation(ctx, b.cs, b.ns, "cfg", dirs, b.cfg.Updates, b.cfg.Timeout, b.out)
}

// measureIdle is the CPU this process (the agent, with the benchmark idle) uses while
// nothing changes, in percent of one core.
func (b *bench) measureIdle(ctx context.Context) float64 {
	// Idle means the agent has written every pod condition and success event.
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if !VolumesReady(&p) {
				return false, nil
			}
		}
		events, err := b.cs.CoreV1().Events(b.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SuccessfulMountVolume"})
		return err == nil && len(events.Items) >= len(pods.Items), nil
	})
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	before, t0 := cpuTime(), time.Now()
	select {
	case <-time.After(b.cfg.Idle):
	case <-ctx.Done():
	}
	return 100 * (cpuTime() - before).Seconds() / time.Since(t0).Seconds()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cleanup deletes the pods (the agent tears them down and completes their deletion), stops
// the agent, and checks that nothing stayed mounted.
func (b *bench) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var errs []error
	if b.agentCancel != nil {
		_ = b.cs.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		prog := report.NewProgress(b.out, "tearing down", len(b.pods))
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := b.cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			prog.Set(len(b.pods) - len(l.Items))
			return len(l.Items) == 0, nil
		})
		prog.Finish()
		if err != nil {
			errs = append(errs, fmt.Errorf("pods not torn down: %w", err))
		}
		b.agentCancel()
		if err := <-b.agentDone; err != nil {
			errs = append(errs, err)
		}
	}
	if leaked := kubecheck.MountsUnder(b.root); len(leaked) > 0 {
		errs = append(errs, fmt.Errorf("%d mounts left under %s", len(leaked), b.root))
	} else {
		_ = os.RemoveAll(b.root)
	}
	for _, n := range append([]string{b.node}, b.extraNodes...) {
		_ = b.cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
	for _, ns := range append([]string{b.ns}, b.extraNamespaces...) {
		_ = b.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}
	return errors.Join(errs...)
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}
