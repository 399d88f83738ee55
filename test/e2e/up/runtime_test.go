package up

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/component/driver/backend"
)

// TestUpRuntimeContainerd is the smoke test of `kubevol up --runtime containerd`: the
// upstream kubelet on containerd is the node; a pod in a container writes to a provisioned
// claim and reads it back, a second pod reads the data after the first is deleted (its log
// fetched through the apiserver from the kubelet), a pod with an httpGet readiness probe
// becomes Ready (the kubelet reaches pod IPs on this machine), and after SIGINT nothing of the run is
// left: no process, container shim, mount, loop device, network namespace, veth, bridge or
// cgroup.
func TestUpRuntimeContainerd(t *testing.T) {
	bin := kubevolBinary(t)
	dir := t.TempDir()
	r := startRuntimeUp(t, bin, dir, "runtime-e2e")
	cs, node := r.cs, r.node
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	n, err := cs.CoreV1().Nodes().Get(ctx, "runtime-e2e", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(got, "containerd://") {
		t.Errorf("node runtime %q, want containerd", got)
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each pod checks its own data and exits: Succeeded only if it read what it expected.
	runToEnd(t, ctx, cs, "writer", "echo kubevol-data > /data/f && sync && test \"$(cat /data/f)\" = kubevol-data && echo wrote")
	if err := cs.CoreV1().Pods("default").Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	runToEnd(t, ctx, cs, "reader", "test \"$(cat /data/f)\" = kubevol-data && echo read-back && ip route")
	logs, err := cs.CoreV1().Pods("default").GetLogs("reader", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the reader's log through the apiserver and the kubelet: %v", err)
	}
	if !strings.Contains(string(logs), "read-back") {
		t.Errorf("reader log %q", logs)
	}
	if strings.Contains(string(logs), "default") {
		t.Errorf("the pod has a route out of the machine: %q", logs)
	}
	probedReady(t, ctx, cs)
	if left, _ := node.Leftovers(); len(left) == 0 {
		t.Error("Leftovers sees nothing of a running node")
	}

	r.interruptLeavesNothing(t, dir)
}

// runToEnd runs a busybox pod with the claim "data" at /data and waits until it succeeds.
func runToEnd(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, script string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "c", Image: kubeletnode.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "d", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: phase %s, %v", name, phase, err)
	}
}

// probedReady runs a pod that serves HTTP on its pod IP with an httpGet readiness probe,
// and waits until the kubelet finds it Ready: the kubelet reaches pod IPs through the
// node's bridge (a probe that followed the default route would leave the machine and fail).
func probedReady(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probed", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: kubeletnode.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the probed pod never became Ready (status %+v): %v", last.Status, err)
	}
}

// runtimeUp is a started `kubevol up --runtime containerd` and its node.
type runtimeUp struct {
	*upRun
	node *kubeletnode.Node
	cfg  *rest.Config
	cs   kubernetes.Interface
	// stock is a kubelet the test started itself, with the kubelet's own volume manager.
	stock *exec.Cmd
}

// startRuntimeUp checks the prerequisites of a containerd node, then starts
// `kubevol up --dir dir --node-name nodeName --runtime containerd args...`; the node is
// cleaned up at the end even if up could not do it.
func startRuntimeUp(t *testing.T, bin, dir, nodeName string, args ...string) *runtimeUp {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("kubevol up needs root (mounts, containers); run the tests as root")
	}
	if err := kubeletnode.CheckPrerequisites(); err != nil {
		t.Fatalf("%v (make test runs hack/install-runtime-deps.sh)", err)
	}
	node, err := kubeletnode.New(kubeletnode.Options{Dir: filepath.Join(dir, "runtime"), NodeName: "x", ClusterBinary: "x", CNIBinDir: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// Runs after up is killed, when the test failed before its SIGINT.
	t.Cleanup(func() { _ = node.Cleanup() })
	r := startUp(t, bin, append([]string{"--dir", dir, "--node-name", nodeName, "--runtime", "containerd", "--status-interval", "500ms"}, args...)...)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	return &runtimeUp{upRun: r, node: node, cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg)}
}

// interruptLeavesNothing sends SIGINT and checks that nothing of the run is left: no
// process, nothing of the node (shims, mounts, network, cgroups), no mount or loop device
// under dirs.
func (r *runtimeUp) interruptLeavesNothing(t *testing.T, dirs ...string) {
	t.Helper()
	pid := r.cmd.Process.Pid
	r.interrupt(t)
	if pids := descendants(pid); len(pids) > 0 {
		t.Errorf("processes left after SIGINT: %v", pids)
	}
	left, err := r.node.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		held, err := backend.Leftovers(d)
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, held...)
	}
	if len(left) > 0 {
		t.Errorf("left after SIGINT: %v", left)
	}
}
