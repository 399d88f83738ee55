package up

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/cluster/proc"
)

const (
	upNode = "up-drivers"
	// driverA is registered by up; it requires attach, so up runs its attacher.
	driverA = "a.ext.kubevol.io"
	// driverB registers itself through the node's plugins_registry.
	driverB = "b.ext.kubevol.io"
)

// TestUpExternalDrivers runs `kubevol up --driver` with two external kubevol drivers under
// other names: one registered by up, one that registers itself. It checks the objects derived
// from their capabilities and the config file, claims of their StorageClasses mounted in
// pods, that up restarts each component killed with SIGKILL without losing state, and that
// Ctrl-C leaves the external drivers running.
func TestUpExternalDrivers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kubevol up needs root (mounts); run the tests as root")
	}
	bin := kubevolBinary(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "up")
	t.Cleanup(func() { unmountUnder(t, tmp) })

	sockA, sockB := "unix://"+filepath.Join(tmp, "a", "csi.sock"), "unix://"+filepath.Join(tmp, "b", "csi.sock")
	drvA := startProc(t, "driver-a", bin, "driver", "--drivername", driverA, "--endpoint", sockA, "--node-id", upNode,
		"--state-dir", filepath.Join(tmp, "a", "state"), "--attach-required")
	drvB := startProc(t, "driver-b", bin, "driver", "--drivername", driverB, "--endpoint", sockB, "--node-id", upNode,
		"--state-dir", filepath.Join(tmp, "b", "state"), "--plugin-registration-dir", filepath.Join(dir, "node", "plugins_registry"))

	config := filepath.Join(tmp, "drivers.yaml")
	if err := os.WriteFile(config, []byte(driverB+":\n  podInfoOnMount: false\n  storageCapacity: false\n  storageClass:\n    volumeBindingMode: Immediate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startUp(t, bin, "--dir", dir, "--node-name", upNode, "--status-interval", "300ms",
		"--driver", sockA, "--driver", sockB, "--driver-config", config)
	cmd, upLog := r.cmd, r.log

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("CSIDriver from capabilities and config", func(t *testing.T) {
		a, err := cs.StorageV1().CSIDrivers().Get(ctx, driverA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkSpec(t, driverA, a.Spec, true, true, true)
		b, err := cs.StorageV1().CSIDrivers().Get(ctx, driverB, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkSpec(t, driverB, b.Spec, false, false, false)
		for name, mode := range map[string]storagev1.VolumeBindingMode{driverA: storagev1.VolumeBindingWaitForFirstConsumer, driverB: storagev1.VolumeBindingImmediate} {
			sc, err := cs.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sc.Provisioner != name || *sc.VolumeBindingMode != mode || sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
				t.Errorf("StorageClass %s: provisioner %s, binding %s, expansion %v; want %s, %s, true", name, sc.Provisioner, *sc.VolumeBindingMode, sc.AllowVolumeExpansion, name, mode)
			}
		}
		// The attacher runs for A only: B does not require attach.
		for _, want := range []struct {
			sock, kind string
			runs       bool
		}{{sockA, "provisioner", true}, {sockA, "attacher", true}, {sockA, "resizer", true}, {sockB, "provisioner", true}, {sockB, "attacher", false}, {sockB, "resizer", true}} {
			if got := findComponent(cmd.Process.Pid, want.kind, want.sock) != 0; got != want.runs {
				t.Errorf("%s for %s running: %v, want %v", want.kind, want.sock, got, want.runs)
			}
		}
	})

	ns := "drivers"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	podA := runPod(t, ctx, cs, ns, "a1", driverA)
	runPod(t, ctx, cs, ns, "b1", driverB)
	if t.Failed() {
		return
	}

	t.Run("supervision", func(t *testing.T) {
		mountA := podMount(t, ctx, cs, dir, podA)
		// Every component up started, killed once, one at a time, as a crash would: the
		// control plane, then kubevol's own and the external drivers' sidecars.
		for _, c := range []struct{ kind, sock string }{
			{"kube-scheduler", ""}, {"kube-controller-manager", ""}, {"etcd", ""}, {"kube-apiserver", ""},
			{"node", ""}, {"driver", ""}, {"provisioner", "unix://" + filepath.Join(dir, "csi", "csi.sock")},
			{"attacher", "unix://" + filepath.Join(dir, "csi", "csi.sock")}, {"resizer", "unix://" + filepath.Join(dir, "csi", "csi.sock")},
			{"provisioner", sockA}, {"attacher", sockA}, {"resizer", sockA}, {"provisioner", sockB}, {"resizer", sockB},
		} {
			pid := findComponent(cmd.Process.Pid, c.kind, c.sock)
			if pid == 0 {
				t.Fatalf("no %s %s under kubevol up", c.kind, c.sock)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				n := findComponent(cmd.Process.Pid, c.kind, c.sock)
				return n != 0 && n != pid, nil
			})
			if err != nil {
				t.Fatalf("%s %s (pid %d) was not restarted: %v", c.kind, c.sock, pid, err)
			}
		}
		// up prints each exit as it sees it, while the status line's probes run aside; the
		// last exit's line may still be on its way to the log.
		var n int
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			log, _ := os.ReadFile(upLog)
			n = len(killedLine.FindAllString(string(log), -1))
			return n >= 14, nil
		})
		if n != 14 {
			t.Errorf("kubevol up reported %d exits by SIGKILL, want 14", n)
		}
		if nodeLog, _ := os.ReadFile(filepath.Join(dir, "logs", "kubevol-node.log")); !strings.Contains(string(nodeLog), "kubevol node exited (signal SIGKILL)") {
			t.Error("the node agent's log does not name its exit")
		}
		if !mounted(mountA) {
			t.Errorf("%s is no longer mounted after the restarts", mountA)
		}
		// The restarted components serve: a new claim of each driver binds and mounts.
		runPod(t, ctx, cs, ns, "a2", driverA)
		runPod(t, ctx, cs, ns, "b2", driverB)
		// The status line counts the node agent's restart.
		err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			log, _ := os.ReadFile(upLog)
			return strings.Contains(string(log), "kubevol node ✓ (1 restart)"), nil
		})
		if err != nil {
			t.Errorf("the status line never showed the node agent's restart")
		}
	})

	// Pods go first, so that nothing stays mounted once up stops.
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("pods not deleted: %v", err)
	}

	r.interrupt(t)
	if drvA.Exited() || drvB.Exited() {
		t.Errorf("Ctrl-C of kubevol up stopped an external driver (a exited: %v, b exited: %v)", drvA.Exited(), drvB.Exited())
	}
	reg := filepath.Join(dir, "node", "plugins_registry")
	if _, err := os.Stat(filepath.Join(reg, driverA+"-reg.sock")); !os.IsNotExist(err) {
		t.Errorf("up's registration socket of %s is still there after up stopped (%v)", driverA, err)
	}
	if _, err := os.Stat(filepath.Join(reg, driverB+"-reg.sock")); err != nil {
		t.Errorf("the self-registering driver's own socket went away: %v", err)
	}
}

// killedLine is up's report of a component killed by SIGKILL.
var killedLine = regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d \S+( \S+)? exited \(signal SIGKILL\) after `)

func checkSpec(t *testing.T, name string, s storagev1.CSIDriverSpec, attach, capacity, podInfo bool) {
	t.Helper()
	if *s.AttachRequired != attach || *s.StorageCapacity != capacity || *s.PodInfoOnMount != podInfo ||
		*s.FSGroupPolicy != storagev1.FileFSGroupPolicy || !slices.Equal(s.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
		t.Errorf("CSIDriver %s: attachRequired %v storageCapacity %v podInfoOnMount %v fsGroupPolicy %v modes %v; want %v %v %v File [Persistent]",
			name, *s.AttachRequired, *s.StorageCapacity, *s.PodInfoOnMount, *s.FSGroupPolicy, s.VolumeLifecycleModes, attach, capacity, podInfo)
	}
}

// runPod creates a claim of the driver's StorageClass and a pod using it, and waits until
// the node agent has its volumes ready.
func runPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, class string) *corev1.Pod {
	t.Helper()
	return runPodOn(t, ctx, cs, ns, name, class, "")
}

// runPodOn is runPod for a pod the scheduler must place on node (any, when empty).
func runPodOn(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, class, node string) *corev1.Pod {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		},
	}
	if node != "" {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	var cur *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if cur == nil {
			p, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				last = err.Error() // the namespace's ServiceAccount may not exist yet
				return false, nil
			}
			cur = p
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cur = p
		for _, c := range p.Status.Conditions {
			if c.Type == "kubevol.io/VolumesReady" {
				last = c.Reason + ": " + c.Message
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("pod %s/%s with a claim of %s: volumes not ready: %v (last: %s)", ns, name, class, err, last)
	}
	return cur
}

// podMount is where the node agent mounted the pod's claim, in the kubelet's layout.
func podMount(t *testing.T, ctx context.Context, cs kubernetes.Interface, dir string, pod *corev1.Pod) string {
	t.Helper()
	pvc, err := cs.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "node", "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pvc.Spec.VolumeName, "mount")
	if !mounted(path) {
		t.Fatalf("%s is not mounted", path)
	}
	return path
}

func mounted(path string) bool {
	mis, _ := mount.ParseMountInfo("/proc/self/mountinfo")
	return slices.ContainsFunc(mis, func(mi mount.MountInfo) bool { return mi.MountPoint == path })
}

// findComponent returns the pid of the component of that kind (the first argument of
// kubevol or of the control plane binary) below pid whose command line names sock (any,
// when sock is empty), or 0.
func findComponent(pid int, kind, sock string) int {
	for _, p := range descendants(pid) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 || args[1] != kind {
			continue
		}
		if sock == "" || slices.Contains(args, sock) {
			return p
		}
	}
	return 0
}

func startProc(t *testing.T, name, bin string, args ...string) *proc.Process {
	t.Helper()
	p, err := proc.Start(name, bin, args, filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("%s log:\n%s", name, proc.LogTail(p.LogPath, 40))
		}
	})
	return p
}

// unmountUnder detaches whatever is still mounted below dir, deepest first: a failed test
// must not leave mounts behind, and nothing below its temporary directory is anyone else's.
func unmountUnder(t *testing.T, dir string) {
	mis, _ := mount.ParseMountInfo("/proc/self/mountinfo")
	var paths []string
	for _, mi := range mis {
		if strings.HasPrefix(mi.MountPoint, dir+"/") {
			paths = append(paths, mi.MountPoint)
		}
	}
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	for _, p := range paths {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", p, err)
		}
	}
}

// TestUpStopsWhenEtcdIsLost: etcd killed while its data directory is gone cannot come back;
// after three failed restarts up stops everything and exits non-zero, naming etcd.
func TestUpStopsWhenEtcdIsLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kubevol up needs root (mounts); run the tests as root")
	}
	dir := t.TempDir()
	r := startUp(t, kubevolBinary(t), "--dir", dir, "--node-name", "up-lost", "--status-interval", "500ms")
	pids := descendants(r.cmd.Process.Pid)
	etcd := findComponent(r.cmd.Process.Pid, "etcd", "")
	if etcd == 0 {
		t.Fatal("no etcd under kubevol up")
	}
	// The running etcd keeps its open files; a new one finds a file where its data was.
	data := filepath.Join(dir, "etcd")
	if err := os.Rename(data, data+".lost"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(etcd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		if err == nil {
			t.Error("kubevol up exited 0 after losing etcd, want an error")
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("kubevol up still runs 5 minutes after etcd was lost")
	}
	log, _ := os.ReadFile(r.log)
	if !strings.Contains(string(log), "etcd did not come back after 3 restarts") {
		t.Errorf("kubevol up did not say it lost etcd")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d outlived kubevol up", pid)
		}
	}
}
