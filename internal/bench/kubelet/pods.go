package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/cluster/up"
)

const namespace = "bench-kubelet"

// bench is one stack's measurements.
type bench struct {
	cfg       Config
	stack     *up.Stack
	dir       string
	cs        kubernetes.Interface
	root      string // the kubelet's --root-dir
	reportDir string // where the update pods' containers report what they read

	mu sync.Mutex
	// By pod name: when it was first seen bound to the node, and Running.
	scheduled, running map[string]time.Time
}

func newBench(ctx context.Context, cfg Config, stack *up.Stack, dir string) (*bench, error) {
	rc := stack.Cluster.RESTConfig()
	rc.QPS, rc.Burst = 1000, 2000
	// Credentials in memory: the first stack's files go while the second still runs, and a
	// client that reloads them from disk would complain every second.
	for _, f := range []struct {
		path *string
		data *[]byte
	}{{&rc.CertFile, &rc.CertData}, {&rc.KeyFile, &rc.KeyData}, {&rc.CAFile, &rc.CAData}} {
		if *f.path != "" {
			data, err := os.ReadFile(*f.path)
			if err != nil {
				return nil, err
			}
			*f.data, *f.path = data, ""
		}
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, stack: stack, dir: dir, cs: cs, root: filepath.Join(dir, "up", "runtime", "kubelet"), reportDir: filepath.Join(dir, "report"),
		scheduled: map[string]time.Time{}, running: map[string]time.Time{}}
	if err := os.MkdirAll(b.reportDir, 0o755); err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// Pods are refused until their namespace's default ServiceAccount exists.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no default ServiceAccount: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace))
	inf := f.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.observe(obj) },
		UpdateFunc: func(_, obj any) { b.observe(obj) },
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return b, nil
}

// stop stops the stack and removes its directory.
func (b *bench) stop() error { return errors.Join(b.stack.Stop(), os.RemoveAll(b.dir)) }

func (b *bench) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, seen := b.scheduled[pod.Name]; !seen {
		b.scheduled[pod.Name] = now
	}
	if _, seen := b.running[pod.Name]; !seen && pod.Status.Phase == corev1.PodRunning {
		b.running[pod.Name] = now
	}
}

// startup creates the case's objects, then its pods, and measures each pod from its
// creation to Running, and from its binding to the node to Running (the kubelet's part,
// without the scheduler's wait for provisioning); then it deletes everything.
func (b *bench) startup(ctx context.Context, c podCase) (toRunning, boundToRunning []time.Duration, err error) {
	pods := make([]*corev1.Pod, c.pods)
	for i := range pods {
		pods[i] = b.pod(fmt.Sprintf("p%d", i), c.kinds, false)
	}
	created, err := b.run(ctx, pods, c.kinds)
	if err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	for _, p := range pods {
		toRunning = append(toRunning, b.running[p.Name].Sub(created[p.Name]))
		boundToRunning = append(boundToRunning, b.running[p.Name].Sub(b.scheduled[p.Name]))
	}
	b.mu.Unlock()
	return toRunning, boundToRunning, b.deleteAll(ctx)
}

// updateAndIdle runs pods with five volumes each, samples the kubelet's CPU and RSS at idle,
// then updates every pod's ConfigMap and measures until each container read it.
func (b *bench) updateAndIdle(ctx context.Context) (st report.Stats, cpu, rssMiB float64, err error) {
	kinds := []string{kindConfigMap, kindSecret, kindDownward, kindEmptyDir, kindPV}
	pods := make([]*corev1.Pod, b.cfg.Pods)
	for i := range pods {
		pods[i] = b.pod(fmt.Sprintf("u%d", i), kinds, true)
	}
	if _, err := b.run(ctx, pods, kinds); err != nil {
		return st, 0, 0, err
	}
	defer func() {
		if derr := b.deleteAll(context.WithoutCancel(ctx)); err == nil {
			err = derr
		}
	}()
	pid, err := kubeletnode.KubeletPID(b.root)
	if err != nil {
		return st, 0, 0, err
	}
	time.Sleep(10 * time.Second) // the pods' start-up work settles
	cpu, rssMiB, err = idle(ctx, pid, b.cfg.Idle)
	if err != nil {
		return st, 0, 0, err
	}

	updated := make([]time.Time, len(pods))
	err = report.Parallel(len(pods), 16, func(i int) error {
		name := objectName(pods[i].Name, 0)
		cm, err := b.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["k"] = "updated"
		updated[i] = time.Now()
		_, err = b.cs.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return st, 0, 0, err
	}
	seen := make([]time.Time, len(pods))
	left := len(pods)
	deadline := time.Now().Add(b.cfg.Timeout)
	for left > 0 && time.Now().Before(deadline) {
		for i, p := range pods {
			if seen[i].IsZero() {
				if _, err := os.Stat(filepath.Join(b.reportDir, p.Name)); err == nil {
					seen[i] = time.Now()
					left--
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if left > 0 {
		return st, 0, 0, fmt.Errorf("%d of %d containers never read their updated ConfigMap within %s", left, len(pods), b.cfg.Timeout)
	}
	var d []time.Duration
	for i := range pods {
		d = append(d, seen[i].Sub(updated[i]))
	}
	return report.Summarize(d), cpu, rssMiB, nil
}

// watchScript reads the ConfigMap every 100 ms without a fork (read -t on a FIFO nobody
// writes is the sleep) and reports a new value by creating a file named after the pod.
const watchScript = `mkfifo /tmp/tick; exec 3<>/tmp/tick; read last < /v0/k
while :; do read -t 0.1 x <&3; read v < /v0/k; if [ "$v" != "$last" ]; then : > /report/$POD_NAME; last=$v; fi; done`

// pod is a busybox pod with one volume per kind, v<j> at /v<j>; watch makes it the update
// pods' container, which also mounts the report directory.
func (b *bench) pod(name string, kinds []string, watch bool) *corev1.Pod {
	c := corev1.Container{Name: "c", Image: kubeletnode.BusyboxImage, ImagePullPolicy: corev1.PullNever,
		Command: []string{"sleep", "3600"}}
	var vols []corev1.Volume
	for j, k := range kinds {
		v := corev1.Volume{Name: fmt.Sprintf("v%d", j)}
		obj := objectName(name, j)
		switch k {
		case kindConfigMap:
			v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: obj}}
		case kindSecret:
			v.Secret = &corev1.SecretVolumeSource{SecretName: obj}
		case kindDownward:
			v.DownwardAPI = &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}
		case kindEmptyDir:
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		case kindPV:
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: obj}
		}
		vols = append(vols, v)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	if watch {
		c.Command = []string{"sh", "-c", watchScript}
		c.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		hostDir := corev1.HostPathDirectoryOrCreate
		vols = append(vols, corev1.Volume{Name: "report", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: b.reportDir, Type: &hostDir}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "report", MountPath: "/report"})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"bench": "kubelet"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{c}, Volumes: vols,
			TerminationGracePeriodSeconds: ptr.To(int64(0)), AutomountServiceAccountToken: ptr.To(false),
		},
	}
}

func objectName(pod string, j int) string { return pod + "-" + strconv.Itoa(j) }

// run creates the objects of each pod's volumes, then the pods, and waits until every pod
// runs; it returns when each pod was created.
func (b *bench) run(ctx context.Context, pods []*corev1.Pod, kinds []string) (map[string]time.Time, error) {
	err := report.Parallel(len(pods)*len(kinds), 16, func(n int) error {
		return b.createObject(ctx, objectName(pods[n/len(kinds)].Name, n%len(kinds)), kinds[n%len(kinds)])
	})
	if err != nil {
		return nil, err
	}
	created := map[string]time.Time{}
	var mu sync.Mutex
	err = report.Parallel(len(pods), 10, func(i int) error {
		now := time.Now()
		mu.Lock()
		created[pods[i].Name] = now
		mu.Unlock()
		_, err := b.cs.CoreV1().Pods(namespace).Create(ctx, pods[i], metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, b.cfg.Timeout, true, func(context.Context) (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range pods {
			if _, ok := b.running[p.Name]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pods not Running within %s: %w%s", b.cfg.Timeout, err, b.pending(ctx))
	}
	return created, nil
}

// pending describes the first pods that do not run, and the namespace's warnings.
func (b *bench) pending(ctx context.Context) string {
	var s strings.Builder
	list, err := b.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		n := 0
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodRunning && n < 3 {
				n++
				fmt.Fprintf(&s, "\n  pod %s: %s %s", p.Name, p.Status.Phase, p.Status.Message)
			}
		}
	}
	events, err := b.cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err == nil {
		for i, e := range events.Items {
			if i >= 5 {
				break
			}
			fmt.Fprintf(&s, "\n  %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return s.String()
}

func (b *bench) createObject(ctx context.Context, name, kind string) error {
	var err error
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace}
	switch kind {
	case kindConfigMap:
		_, err = b.cs.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "initial"}}, metav1.CreateOptions{})
	case kindSecret:
		_, err = b.cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"k": []byte("initial")}}, metav1.CreateOptions{})
	case kindPV:
		_, err = b.cs.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: meta,
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}},
			metav1.CreateOptions{})
	}
	return err
}

// deleteAll deletes the pods, then their objects, and waits until the pods and the
// claims' volumes are gone, so that the next case starts on a quiet node.
func (b *bench) deleteAll(ctx context.Context) error {
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	sel := metav1.ListOptions{LabelSelector: "bench=kubelet"}
	if err := b.cs.CoreV1().Pods(namespace).DeleteCollection(ctx, opts, sel); err != nil {
		return err
	}
	for _, del := range []func() error{
		func() error {
			return b.cs.CoreV1().ConfigMaps(namespace).DeleteCollection(ctx, opts, metav1.ListOptions{})
		},
		func() error {
			return b.cs.CoreV1().Secrets(namespace).DeleteCollection(ctx, opts, metav1.ListOptions{})
		},
		func() error {
			return b.cs.CoreV1().PersistentVolumeClaims(namespace).DeleteCollection(ctx, opts, metav1.ListOptions{})
		},
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.cfg.Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := b.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		v, err := b.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(p.Items) == 0 && len(v.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods and volumes not gone: %w", err)
	}
	b.mu.Lock()
	b.scheduled, b.running = map[string]time.Time{}, map[string]time.Time{}
	b.mu.Unlock()
	return nil
}
