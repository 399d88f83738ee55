package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/pkg/pluginregistration"
	"github.com/kubevol/kubevol/pkg/podstatus"
	"github.com/kubevol/kubevol/pkg/volume"
)

// Environment set by `make test`.
const (
	// binaryEnv names the built kubevol binary; this module cannot import kubevol's
	// internal packages, so it starts the cluster the way a user does: `kubevol up`.
	binaryEnv = "KUBEVOL_BINARY"
	// driverName is the CSI driver `kubevol up` runs.
	driverName = "local.kubevol.io"
)

// TestEmbed runs the embedding of main.go against a cluster started with `kubevol up`.
// up runs its own node agent for its own Node; the embedded manager serves a second Node,
// with its own root directory and its own plugins_registry, where the test registers up's
// CSI driver (the node-driver-registrar's role) so both nodes use the one driver process.
// A pod bound to the second Node gets a configMap volume and an inline CSI volume, which
// must be mounted by the embedded manager, and torn down when the pod is deleted, after
// which the manager completes the deletion.
func TestEmbed(t *testing.T) {
	bin := os.Getenv(binaryEnv)
	if bin == "" {
		t.Fatalf("$%s must name the kubevol binary (make test builds it and sets it)", binaryEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts volumes: run it as root")
	}
	dir := tempDir(t)
	upDir, root := filepath.Join(dir, "up"), filepath.Join(dir, "node")
	suffix := rand.String(5)
	upNode, node := "embed-up-"+suffix, "embed-"+suffix

	client := startUp(t, bin, upDir, upNode)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The Node is the embedder's; the test registers it, as a kubelet or a runtime would.
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runEmbedded(t, client, node, root)
	// <up dir>/csi/csi.sock is where up serves its built-in driver.
	registerDriver(t, volume.Paths{Root: root}.PluginRegistryDir(), filepath.Join(upDir, "csi", "csi.sock"))
	poll(t, ctx, "the driver on the CSINode of "+node, func() (bool, error) {
		cn, err := client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(cn.Spec.Drivers) == 1 && cn.Spec.Drivers[0].Name == driverName, err
	})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "embed-" + suffix}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"greeting": "hello from the embedding"}}
	if _, err := client.CoreV1().ConfigMaps(ns.Name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(ns.Name).Create(ctx, embeddedPod(node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the pod's VolumesReady condition", func() (bool, error) {
		p, err := client.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == podstatus.VolumesReadyCondition {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})

	paths := volume.Paths{Root: root}
	got, err := os.ReadFile(filepath.Join(paths.PodVolumeDir(pod.UID, "kubernetes.io/configmap", "cfg"), "greeting"))
	if err != nil || string(got) != cm.Data["greeting"] {
		t.Errorf("configMap file = %q, %v; want %q", got, err, cm.Data["greeting"])
	}
	target := filepath.Join(paths.PodVolumeDir(pod.UID, "kubernetes.io/csi", "scratch"), "mount")
	if !slices.Contains(mountsUnder(t, root), target) {
		t.Errorf("the CSI volume is not mounted at %s; mounts under the root: %v", target, mountsUnder(t, root))
	}
	if err := os.WriteFile(filepath.Join(target, "probe"), []byte("x"), 0o600); err != nil {
		t.Errorf("the CSI volume is not writable: %v", err)
	}

	// Deletion: the manager tears the volumes down, then deletes the pod (grace period 0).
	if err := client.CoreV1().Pods(ns.Name).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the pod's deletion", func() (bool, error) {
		_, err := client.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if left := mountsUnder(t, root); len(left) > 0 {
		t.Errorf("mounts left after the pod was deleted: %v", left)
	}
	if _, err := os.Stat(paths.PodDir(pod.UID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod directory still there after the deletion: %v", err)
	}
}

// embeddedPod uses a configMap volume and an inline CSI volume; the embedded manager runs
// no containers, but sets up only volumes a container mounts, as the kubelet.
func embeddedPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []corev1.VolumeMount{
				{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "scratch", MountPath: "/scratch"},
			}}},
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: driverName, VolumeAttributes: map[string]string{"type": "dir", "size": "16Mi"}}}},
			},
		},
	}
}

// runEmbedded runs main.go's run for node until the test ends.
func runEmbedded(t *testing.T, client kubernetes.Interface, node, root string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, client, node, root) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("embedded manager: %v", err)
		}
		// The manager leaves mounts in place when it stops, as the kubelet; a pod that was
		// not torn down (a failed test) leaves some, which the test reports and removes.
		unmountAll(t, root)
	})
}

// registerDriver serves a registration socket for up's driver in the embedded root's
// plugins_registry, as node-driver-registrar would beside the driver.
func registerDriver(t *testing.T, registry, endpoint string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r := &pluginregistration.Registrar{Dir: registry, Driver: driverName, Endpoint: endpoint}
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("registrar: %v", err)
		}
	})
}

// startUp runs `kubevol up` until the test ends and returns a client of its cluster.
func startUp(t *testing.T, bin, dir, node string) kubernetes.Interface {
	logPath := filepath.Join(filepath.Dir(dir), "up.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "up", "--dir", dir, "--node-name", node)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Its own process group, and SIGTERM if this test dies first: up then stops the cluster
	// and its components, which die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	kubeconfig := make(chan string, 1)
	go func() {
		// up prints "kubectl --kubeconfig <file> get nodes" once everything is ready.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "kubectl" && f[1] == "--kubeconfig" {
				kubeconfig <- f[2]
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Errorf("kubevol up did not stop within a minute of SIGTERM; killing it")
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("kubevol up's output:\n%s\ncomponent logs are in %s", tail(logPath, 30), filepath.Join(dir, "logs"))
		}
	})
	var path string
	select {
	case path = <-kubeconfig:
	case <-exited:
		t.Fatalf("kubevol up exited before it was ready:\n%s", tail(logPath, 30))
	case <-time.After(5 * time.Minute):
		t.Fatalf("kubevol up not ready within 5 minutes:\n%s", tail(logPath, 30))
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(config)
}

// tempDir is removed at the end only when nothing is mounted below it: a leftover mount
// keeps its data, and the directory is reported.
func tempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "kubevol-embed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if left := mountsUnder(t, dir); len(left) > 0 {
			t.Errorf("mounts left under %s, which is kept: %v", dir, left)
			return
		}
		if t.Failed() {
			t.Logf("kept %s for inspection", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// mountsUnder lists the mount points below dir, from /proc/self/mountinfo.
func mountsUnder(t *testing.T, dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := unescape(f[4]); strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll reports and detaches every mount below root, deepest first.
func unmountAll(t *testing.T, root string) {
	left := mountsUnder(t, root)
	if len(left) == 0 {
		return
	}
	t.Errorf("mounts left under %s: %v", root, left)
	slices.SortFunc(left, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range left {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", p, err)
		}
	}
}

func poll(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
