// Package node_test runs `kubevol node` against the real local control plane: pods are
// scheduled by kube-scheduler onto the agent's own Node and their volumes are checked on
// disk.
package node_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/pkg/podstatus"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// agent is one `kubevol node` process with its own Node and root directory.
type agent struct {
	t           *testing.T
	client      kubernetes.Interface
	name        string
	root        string
	metricsAddr string
	proc        *framework.Process
	ns          string
}

// startAgent runs an agent for a fresh node. At the end of the test it is stopped, its
// Node deleted, and every mount under its root directory reported as leaked (and unmounted).
func startAgent(t *testing.T, extraArgs ...string) *agent {
	t.Helper()
	a := &agent{t: t, client: framework.Client(t), name: "kv-" + rand.String(6), ns: framework.Namespace(t)}
	root, err := os.MkdirTemp("", "kubevol-node-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	a.root = root
	a.metricsAddr = freeAddr(t)
	t.Cleanup(func() {
		if leaked := kubecheck.MountsUnder(root); len(leaked) > 0 {
			t.Errorf("mounts leaked under %s: %v", root, leaked)
			for i := len(leaked) - 1; i >= 0; i-- {
				_ = mount.New("").Unmount(leaked[i])
			}
		}
		_ = os.RemoveAll(root)
		_ = a.client.CoreV1().Nodes().Delete(context.Background(), a.name, metav1.DeleteOptions{})
	})
	// The agent runs as its node, with nothing but what the Node authorizer grants.
	args := append([]string{"node", "--node-name", a.name, "--root-dir", root, "--metrics-address", a.metricsAddr, "-v", "2", "--register-with-taints="},
		framework.NodeCredentialArgs(t)...)
	args = append(args, extraArgs...)
	a.proc = framework.StartKubevol(t, args...)
	// Pods go first, while the agent still runs, so their volumes are torn down by it.
	t.Cleanup(a.deleteAllPods)
	a.waitNodeReady()
	return a
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (a *agent) ctx(d time.Duration) context.Context { return framework.Context(a.t, d) }

func (a *agent) waitNodeReady() {
	a.t.Helper()
	err := wait.PollUntilContextTimeout(a.ctx(time.Minute), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := a.client.CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return len(n.Spec.Taints) == 0, nil
			}
		}
		return false, nil
	})
	if err != nil {
		a.t.Fatalf("node %s not ready: %v", a.name, err)
	}
}

// deleteAllPods deletes the namespace's pods and waits until the agent has torn them down
// and completed their deletion.
func (a *agent) deleteAllPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_ = a.client.CoreV1().Pods(a.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := a.client.CoreV1().Pods(a.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		a.t.Errorf("pods of %s not deleted by the agent: %v", a.ns, err)
		l, _ := a.client.CoreV1().Pods(a.ns).List(context.Background(), metav1.ListOptions{})
		for _, p := range l.Items {
			a.t.Logf("left: pod %s uid %s deletionTimestamp %v finalizers %v conditions %v", p.Name, p.UID, p.DeletionTimestamp, p.Finalizers, p.Status.Conditions)
		}
	}
}

// pod builds a pod for this agent's node: kube-scheduler places it through the nodeSelector.
func (a *agent) pod(name string, vols ...corev1.Volume) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: a.name},
			Containers:   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:      vols,
		},
	}
	for _, v := range vols {
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
	}
	return p
}

func (a *agent) create(p *corev1.Pod) *corev1.Pod {
	a.t.Helper()
	out, err := a.client.CoreV1().Pods(a.ns).Create(a.ctx(time.Minute), p, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// waitPod polls the pod until cond holds.
func (a *agent) waitPod(name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	a.t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(a.ctx(timeout+time.Second), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := a.client.CoreV1().Pods(a.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		a.t.Fatalf("pod %s: %s: %v; last status %+v", name, what, err, last.Status)
	}
	return last
}

func volumesReady(p *corev1.Pod) bool { return condition(p) == corev1.ConditionTrue }

func condition(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == podstatus.VolumesReadyCondition {
			return c.Status
		}
	}
	return ""
}

func (a *agent) waitGone(name string, timeout time.Duration) {
	a.t.Helper()
	if err := kubecheck.WaitPodGone(a.ctx(timeout+time.Second), a.client, a.ns, name, timeout); err != nil {
		a.t.Fatal(err)
	}
}

// waitEvent waits for an event on the pod whose reason and message match.
func (a *agent) waitEvent(podName, reason, substr string, timeout time.Duration) corev1.Event {
	a.t.Helper()
	return framework.WaitForEvent(a.ctx(timeout+time.Second), a.t, a.client, a.ns, podName, fmt.Sprintf("%s event containing %q on %s", reason, substr, podName), timeout, kubecheck.EventWith(reason, substr))
}

func (a *agent) volumeDir(p *corev1.Pod, plugin, vol string) string {
	return filepath.Join(a.root, "pods", string(p.UID), "volumes", plugin, vol)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(data)
}

func mustf(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
