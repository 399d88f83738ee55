package nodes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	benchnode "github.com/kubevol/kubevol/internal/bench/node"
	"github.com/kubevol/kubevol/internal/bench/report"
)

// podSpec is pod j of node i: the shared ConfigMap cfg, the node's Secret, an emptyDir and
// the downward API. It tolerates every taint, so that neither the agents' taint nor the
// node lifecycle controller's keeps or evicts it.
func (r *run) podSpec(i, j int) *corev1.Pod {
	vol := func(name string, src corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: src}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%04d-p%03d", i, j), Labels: map[string]string{"bench": r.id}},
		Spec: corev1.PodSpec{
			SchedulerName:                schedulerName,
			AutomountServiceAccountToken: new(false),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{
				vol("configmap", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}),
				vol("secret", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName(i)}}),
				vol("emptydir", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
				vol("downwardapi", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}),
			},
		},
	}
	for _, v := range p.Spec.Volumes {
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/v/" + v.Name})
	}
	return p
}

// watchPods records when each pod is first seen with its volumes ready. The cache keeps a
// pod's name, UID and conditions only, so that it costs this process (which, in library
// mode, is the agents' too) little.
func (r *run) watchPods(ctx context.Context) error {
	lw := cache.NewListWatchFromClient(r.cs.CoreV1().RESTClient(), "pods", r.ns, fields.Everything())
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !benchnode.VolumesReady(p) {
			return
		}
		r.mu.Lock()
		if _, seen := r.ready[p.UID]; !seen {
			r.ready[p.UID] = time.Now()
		}
		r.mu.Unlock()
		select {
		case r.readyCh <- struct{}{}:
		default:
		}
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }},
		Transform: func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
					Status: corev1.PodStatus{Conditions: p.Status.Conditions}}, nil
			}
			return obj, nil
		},
	})
	// Until the run's cleanup: the benchmark's own watch is in the baseline.
	wctx, cancel := context.WithCancel(context.Background())
	r.stopWatch = cancel
	go ctrl.RunWithContext(wctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return ctx.Err()
	}
	return nil
}

// createPods creates every node's pods, unscheduled.
func (r *run) createPods(ctx context.Context) error {
	n := r.nodeCount * r.cfg.PodsPerNode
	r.pods = make([]*corev1.Pod, n)
	prog := report.NewProgress(r.out, "creating pods", n)
	done := 0
	err := report.Parallel(n, 32, func(k int) error {
		p, err := r.cs.CoreV1().Pods(r.ns).Create(ctx, r.podSpec(k/r.cfg.PodsPerNode, k%r.cfg.PodsPerNode), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.pods[k] = p
		done++
		prog.Set(done)
		r.mu.Unlock()
		return nil
	})
	prog.Finish()
	return err
}

// bindAndMount binds every pod to its node at once and returns, per pod, the time from its
// binding to the benchmark seeing its volumes ready.
func (r *run) bindAndMount(ctx context.Context) ([]time.Duration, error) {
	n := len(r.pods)
	prog := report.NewProgress(r.out, "binding and mounting", n)
	err := benchnode.BindAll(ctx, r.cs, r.pods, func(k int) string { return r.nodes[k/r.cfg.PodsPerNode] },
		func(k int, at time.Time) {
			r.mu.Lock()
			r.bound[r.pods[k].UID] = at
			r.pods[k].Spec.NodeName = r.nodes[k/r.cfg.PodsPerNode]
			r.mu.Unlock()
		},
		func() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.ready) }, r.readyCh, r.cfg.Timeout, prog)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, n)
	for k, p := range r.pods {
		// The agent can see a binding before the Bind call returns: clamp at zero.
		out[k] = max(r.ready[p.UID].Sub(r.bound[p.UID]), 0)
	}
	return out, nil
}

// settle waits until the agents' success events are written (at least one per pod, and no
// more coming for a second), so that the idle window is idle.
func (r *run) settle(ctx context.Context) {
	last := -1
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, false, func(ctx context.Context) (bool, error) {
		l, err := r.cs.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SuccessfulMountVolume", ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		n := len(l.Items)
		stable := n == last && n >= len(r.pods)
		last = n
		return stable, nil
	})
}
