package up

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// TestKubevolVM is the smoke test of the kubelet with kubevol's volume
// manager (`kubevol up --runtime containerd --volume-manager kubevol`): containers read a
// ConfigMap update, a subPath and a subPathExpr of a claim, the claim's data (a CSI volume
// of kubevol's driver) and a raw block device; the kubelet killed and started again keeps
// the running pod's container and mounts; and once the pods are deleted nothing is left
// under the kubelet's root. (Its name is short: the driver's registration socket lies
// under the test's directory, and a socket's path holds at most 107 bytes.)
func TestKubevolVM(t *testing.T) {
	bin := kubevolBinary(t)
	dir := t.TempDir()
	kubeletLog := filepath.Join(dir, "logs", "kubelet.log")
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(kubeletLog)
			t.Logf("kubelet log:\n%s", tail(string(data), 80))
		}
	})
	r := startRuntimeUp(t, bin, dir, "kubevol-vm", "--volume-manager", "kubevol")
	cs := r.cs
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if data, _ := os.ReadFile(kubeletLog); !strings.Contains(string(data), "The kubelet runs kubevol's volume manager") {
		t.Fatalf("the kubelet does not say it runs kubevol's volume manager; its log:\n%s", tail(string(data), 40))
	}
	const ns = "default"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf", Namespace: ns}, Data: map[string]string{"k": "v1"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createClaim(t, ctx, cs, ns, "data", "", corev1.PersistentVolumeFilesystem)
	createBlockClass(t, ctx, cs)
	createClaim(t, ctx, cs, ns, "raw", "kubevol-vm-block", corev1.PersistentVolumeBlock)

	// One long-running pod holds every volume kind of the smoke. Its script checks, once,
	// what it can check alone, and then reports every new ConfigMap value it reads.
	script := `set -e
echo x > /sub/f; test "$(cat /data/s/f)" = x
echo y > /expr/f; test "$(cat /data/$POD_NAME/f)" = y
echo block > /tmp/b; dd if=/tmp/b of=/dev/xvda bs=512 count=1 conv=sync 2>/dev/null
test "$(dd if=/dev/xvda bs=5 count=1 2>/dev/null)" = block
echo checks-passed
last=
while true; do v=$(cat /conf/k); if [ "$v" != "$last" ]; then echo "seen:$v"; last=$v; fi; sleep 0.05; done`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "volumes", Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "c", Image: kubeletnode.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "conf", MountPath: "/conf"},
					{Name: "data", MountPath: "/data"},
					{Name: "data", MountPath: "/sub", SubPath: "s"},
					{Name: "data", MountPath: "/expr", SubPathExpr: "$(POD_NAME)"},
				},
				VolumeDevices: []corev1.VolumeDevice{{Name: "raw", DevicePath: "/dev/xvda"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "raw", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "raw"}}},
			},
		},
	}
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, ctx, cs, ns, pod.Name, "seen:v1", 500*time.Millisecond, 3*time.Minute)
	if logs := podLog(ctx, cs, ns, pod.Name); !strings.Contains(logs, "checks-passed") {
		t.Fatalf("the pod's checks failed; its log:\n%s", logs)
	}
	updateSeen(t, ctx, cs, ns, pod.Name, "v2")

	// The kubelet killed and started again (up restarts it): the container keeps running
	// with its mounts, and updates still reach it.
	restarts := containerRestarts(t, ctx, cs, ns, pod.Name)
	root := filepath.Join(dir, "runtime", "kubelet")
	killKubelet(t, root)
	waitKubeletBack(t, ctx, kubeletLog, 2)
	updateSeen(t, ctx, cs, ns, pod.Name, "v3")
	if got := containerRestarts(t, ctx, cs, ns, pod.Name); got != restarts {
		t.Errorf("the container restarted %d times across the kubelet's restart", got-restarts)
	}

	// Switched to the kubelet's own volume manager and back under the running pod: the
	// container keeps running with its mounts, and kubevol's takes over what the kubelet's
	// held.
	stock := r.switchToStockKubelet(t, root, filepath.Join(dir, "logs", "kubelet-stock.log"))
	mounts := kubecheck.MountsUnder(filepath.Join(root, "pods", string(created.UID)))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(stock)
		return strings.Contains(string(data), "Starting Kubelet Volume Manager"), nil
	})
	if err != nil {
		data, _ := os.ReadFile(stock)
		t.Fatalf("the kubelet did not start with its own volume manager: %v\n%s", err, tail(string(data), 40))
	}
	time.Sleep(10 * time.Second) // the stock volume manager's reconstruction and first reconcile
	if got := kubecheck.MountsUnder(filepath.Join(root, "pods", string(created.UID))); len(got) < len(mounts) {
		t.Errorf("the kubelet's own volume manager unmounted the running pod's volumes: %v, were %v", got, mounts)
	}
	r.switchBack(t, root)
	waitKubeletBack(t, ctx, kubeletLog, 3)
	updateSeen(t, ctx, cs, ns, pod.Name, "v4")
	if got := containerRestarts(t, ctx, cs, ns, pod.Name); got != restarts {
		t.Errorf("the container restarted %d times across the switches", got-restarts)
	}

	checkFailedMount(t, ctx, cs, ns, "kubevol-vm")

	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err
	})
	podDir := filepath.Join(dir, "runtime", "kubelet", "pods", string(created.UID))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Lstat(podDir)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Errorf("%s still there after the pod was deleted: %v", podDir, leftUnder(podDir))
	}
	r.interruptLeavesNothing(t, dir)
}

// checkFailedMount runs a pod with a claim that does not exist and an nfs volume, which
// kubevol does not implement: the kubelet posts its FailedMount, with its words, naming both.
// The pod is bound to the node by name (the scheduler would keep a pod of a missing claim).
func checkFailedMount(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, node string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "faulty", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers: []corev1.Container{{Name: "c", Image: kubeletnode.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"true"},
				VolumeMounts: []corev1.VolumeMount{{Name: "gone", MountPath: "/gone"}, {Name: "nfs", MountPath: "/nfs"}}}},
			Volumes: []corev1.Volume{
				{Name: "gone", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "gone"}}},
				{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "192.0.2.1", Path: "/x"}}},
			},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=faulty,reason=FailedMount"})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			got = e.Message
			if strings.HasPrefix(got, "Unable to attach or mount volumes: unmounted volumes=[gone nfs]") &&
				strings.Contains(got, "failed to process volumes=[gone nfs]") && strings.Contains(got, "of type nfs") &&
				strings.Contains(got, `"gone"`) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no FailedMount naming the missing claim and the nfs type; last: %q", got)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createClaim(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, class string, mode corev1.PersistentVolumeMode) {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  &mode,
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
	if class != "" {
		claim.Spec.StorageClassName = &class
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createBlockClass is examples/block's class: the built-in driver's loop devices.
func createBlockClass(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "kubevol-vm-block"}, Provisioner: "local.kubevol.io",
		Parameters: map[string]string{"type": "block"}, VolumeBindingMode: &mode}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// updateSeen changes the ConfigMap and waits until the container reads the new value,
// which it reports as a figure.
func updateSeen(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, pod, value string) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "conf", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = value
	start := time.Now()
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, ctx, cs, ns, pod, "seen:"+value, 50*time.Millisecond, time.Minute)
	framework.Figure(t, "kubevol's volume manager in the kubelet: ConfigMap update %s read in the container after %.2f s (the container reads every 50 ms, the test its log every 50 ms)", value, time.Since(start).Seconds())
}

func waitLog(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, pod, want string, every, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, every, timeout, true, func(ctx context.Context) (bool, error) {
		return strings.Contains(podLog(ctx, cs, ns, pod), want), nil
	})
	if err != nil {
		p, _ := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		var status any
		if p != nil {
			status = p.Status
		}
		t.Fatalf("pod %s never logged %q: %v\nlog:\n%s\nstatus: %+v\nevents: %s", pod, want, err, podLog(ctx, cs, ns, pod), status, kubecheck.NamespaceEvents(ctx, cs, ns))
	}
}

func podLog(ctx context.Context, cs kubernetes.Interface, ns, pod string) string {
	data, _ := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(data)
}

func containerRestarts(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, pod string) int32 {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// killKubelet sends SIGKILL to the kubelet whose --root-dir is root, and returns its
// command line and environment.
func killKubelet(t *testing.T, root string) (args, env []string) {
	t.Helper()
	pid, err := kubeletnode.KubeletPID(root)
	if err != nil {
		t.Fatal(err)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	split := func(b []byte) []string { return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00") }
	return split(cmdline), split(environ)
}

// switchToStockKubelet stops up's supervision (SIGSTOP), kills its kubelet and starts the
// same kubelet with its own volume manager, logging to log, which it returns.
func (r *runtimeUp) switchToStockKubelet(t *testing.T, root, log string) string {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.cmd.Process.Signal(syscall.SIGCONT) })
	args, env := killKubelet(t, root)
	var kept []string
	for _, e := range env {
		if !strings.HasPrefix(e, "KUBEVOL_VOLUME_MANAGER=") {
			kept = append(kept, e)
		}
	}
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(kept, "KUBEVOL_VOLUME_MANAGER=kubelet")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.stock = cmd
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
	})
	return log
}

// switchBack kills the stock kubelet and lets up restart its own.
func (r *runtimeUp) switchBack(t *testing.T, root string) {
	t.Helper()
	_ = r.stock.Process.Kill()
	_ = r.stock.Wait()
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// waitKubeletBack waits until the kubelet's log says, for the nth time, that it runs
// kubevol's volume manager, and that its volume manager has synced.
func waitKubeletBack(t *testing.T, ctx context.Context, log string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(log)
		s := string(data)
		i := strings.LastIndex(s, "The kubelet runs kubevol's volume manager")
		return i > 0 && strings.Count(s, "The kubelet runs kubevol's volume manager") >= n && strings.Contains(s[i:], "Volume manager initialized"), nil
	})
	if err != nil {
		data, _ := os.ReadFile(log)
		t.Fatalf("the kubelet did not come back with kubevol's volume manager: %v\n%s", err, tail(string(data), 40))
	}
}

// leftUnder lists what is under dir.
func leftUnder(dir string) []string {
	var out []string
	_ = filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err == nil {
			out = append(out, path)
		}
		return nil
	})
	return out
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
