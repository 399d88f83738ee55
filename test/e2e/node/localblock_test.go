package node_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// A Block-mode local PV whose path is a loop device: the pod's volumeDevices link leads to
// that device, and bytes written through it are on the device; the kubelet's path checks
// refuse a missing path and a regular file with a clear FailedMount, nothing mapped. The
// loop device is detached when the test ends, after the agent has torn the pods down, even
// if the test fails.
func TestLocalBlockVolume(t *testing.T) {
	t.Parallel()
	// Before startAgent: cleanups run last-registered first, so the device is detached
	// after the agent's teardown of the pods that map it.
	dev := loopDevice(t, 8<<20)
	a := startAgent(t)
	node := labelAffinity(corev1.LabelHostname, a.name)
	claim := a.localClaimOf(t, dev, node, corev1.ReadWriteOnce, corev1.PersistentVolumeBlock)
	p := a.create(a.onNode(a.blockPod("raw", claim)))
	p = a.waitPod(p.Name, time.Minute, "local block volume mapped", volumesReady)

	link := filepath.Join(a.root, "pods", string(p.UID), "volumeDevices", "kubernetes.io~local-volume", claim)
	var got, want unix.Stat_t
	mustf(t, unix.Stat(link, &got), "stat the pod's device")
	mustf(t, unix.Stat(dev, &want), "stat %s", dev)
	if got.Mode&unix.S_IFMT != unix.S_IFBLK || got.Rdev != want.Rdev {
		t.Fatalf("%s: mode %o rdev %#x, want the block device %s (rdev %#x)", link, got.Mode, got.Rdev, dev, want.Rdev)
	}
	proof := []byte("written through the pod's device")
	mustf(t, os.WriteFile(link, proof, 0), "write through the pod's device")
	back := make([]byte, len(proof))
	f, err := os.Open(dev)
	mustf(t, err, "open %s", dev)
	_, err = f.ReadAt(back, 0)
	f.Close()
	mustf(t, err, "read %s", dev)
	if !bytes.Equal(back, proof) {
		t.Fatalf("%s holds %q, want what the pod's device was given", dev, back)
	}

	// The path checks, before anything is mapped.
	file := filepath.Join(t.TempDir(), "not-a-device")
	mustf(t, os.WriteFile(file, []byte("x"), 0o644), "write")
	for name, c := range map[string]struct{ path, msg string }{
		"missing": {"/dev/kubevol-e2e-no-such-device", `path "/dev/kubevol-e2e-no-such-device" does not exist`},
		"file":    {file, "is neither a directory nor a block device"},
	} {
		bad := a.create(a.onNode(a.blockPod(name, a.localClaimOf(t, c.path, node, corev1.ReadWriteOnce, corev1.PersistentVolumeBlock))))
		a.waitEvent(bad.Name, "FailedMapVolume", c.msg, time.Minute)
		if m := kubecheck.MountsUnder(filepath.Join(a.root, "pods", string(bad.UID))); len(m) != 0 {
			t.Errorf("pod %s: mounted despite the bad path: %v", name, m)
		}
		if _, err := os.Lstat(filepath.Join(a.root, "pods", string(bad.UID), "volumeDevices")); err == nil {
			t.Errorf("pod %s: a volumeDevices entry despite the bad path", name)
		}
	}
	ctx := a.ctx(time.Minute)
	mustf(t, a.client.CoreV1().Pods(a.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}), "delete pod")
	a.waitGone(p.Name, time.Minute)
	if m := kubecheck.MountsUnder(filepath.Join(a.root, "plugins")); len(m) != 0 {
		t.Errorf("the device is still bind-mounted after its pod: %v", m)
	}
}

// blockPod is a pod whose container maps the claim as a raw block device.
func (a *agent) blockPod(name, claim string) *corev1.Pod {
	p := a.pod(name)
	p.Spec.Volumes = []corev1.Volume{kubecheck.ClaimVolume("raw", claim)}
	p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "raw", DevicePath: "/dev/raw"}}
	return p
}

// loopDevice attaches a loop device over a sparse file of size bytes and detaches it when
// the test ends.
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "disk.img")
	mustf(t, os.WriteFile(backing, nil, 0o600), "create backing file")
	mustf(t, os.Truncate(backing, size), "size backing file")
	out, err := exec.Command("losetup", "-f", "--show", backing).CombinedOutput()
	mustf(t, err, "losetup: %s", out)
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}
