package lifecycle

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// A raw block PVC (volumeMode: Block) used through volumeDevices, with attach: the pod's
// link in pods/<uid>/volumeDevices leads to the published loop device, data written through
// it survives deleting and recreating the pod, a pod that mounts the block claim as a
// filesystem is refused, and the teardown runs NodeUnpublish → NodeUnstage →
// ControllerUnpublish → DeleteVolume and leaves no mount, link or loop device.
func TestBlockVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{attachRequired: true, scParams: map[string]string{"type": "block"}})
	e.waitRegistered()
	pvc := e.pvcOf("raw", "16Mi", corev1.PersistentVolumeBlock)
	pod := e.waitVolumesReady(e.podWith("app", nil, []corev1.Volume{kubecheck.ClaimVolume("raw", pvc.Name)}))

	pv := e.boundPV(pvc.Name)
	handle := pv.Spec.CSI.VolumeHandle
	blockDir := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices")
	link := e.checkMapped(pod, pv.Name)

	// NodeGetVolumeStats on the published device feeds the capacity metric, as the kubelet's
	// block volume metrics.
	series := fmt.Sprintf(`kubelet_volume_stats_capacity_bytes{namespace=%q,persistentvolumeclaim="raw"} 1.6777216e+07`, e.ns)
	e.poll("block volume capacity on /metrics", func(context.Context) (bool, error) {
		body, err := kubecheck.Get(e.metrics)
		return err == nil && strings.Contains(body, series), nil
	})

	pattern := make([]byte, 4096)
	_, _ = rand.Read(pattern)
	if err := writeDevice(link, pattern); err != nil {
		t.Fatalf("write through the device: %v", err)
	}

	// The same claim mounted as a filesystem is refused with upstream's volumeMode check.
	wrong := e.pod("wrong", kubecheck.ClaimVolume("raw", pvc.Name))
	e.poll("pod wrong refused", func(ctx context.Context) (bool, error) {
		cur, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, wrong.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == "kubevol.io/VolumesReady" && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "volumeMode Block") {
				return true, nil
			}
		}
		return false, nil
	})
	e.deletePod(wrong)

	e.deletePod(pod)
	for _, p := range []string{link, filepath.Join(blockDir, "publish", pv.Name, string(pod.UID)), filepath.Join(blockDir, pv.Name, "dev", string(pod.UID))} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after the pod was deleted: %v", p, err)
		}
	}

	again := e.waitVolumesReady(e.podWith("again", nil, []corev1.Volume{kubecheck.ClaimVolume("raw", pvc.Name)}))
	got, err := readDevice(e.checkMapped(again, pv.Name), len(pattern))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern) {
		t.Error("the data written by the first pod is not on the device of the second")
	}
	e.deletePod(again)
	e.deleteClaim(pvc.Name, pv.Name)

	seq := e.succeeded(handle)
	order := []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume", "DeleteVolume"}
	if err := inOrder(seq, order); err != nil {
		t.Errorf("driver calls on %s: %v; calls: %v", handle, err, seq)
	}
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"} {
		if n := count(seq, m); n != 2 {
			t.Errorf("%s succeeded %d times, want 2 (one per pod); calls: %v", m, n, seq)
		}
	}
	if entries, _ := os.ReadDir(blockDir); len(entries) > 0 {
		var names []string
		for _, en := range entries {
			names = append(names, en.Name())
		}
		// staging/ and publish/ may stay as empty parents; nothing of the volume may.
		for _, sub := range []string{filepath.Join(blockDir, pv.Name), filepath.Join(blockDir, "staging", pv.Name), filepath.Join(blockDir, "publish", pv.Name)} {
			if _, err := os.Lstat(sub); !os.IsNotExist(err) {
				t.Errorf("%s left after the volume was deleted (in %s: %v)", sub, blockDir, names)
			}
		}
	}
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), e.dir) {
		t.Errorf("loop devices left:\n%s", out)
	}
}

// checkMapped checks the kubelet's block layout of the pod's volume and returns the pod's
// link to the device.
func (e *env) checkMapped(pod *corev1.Pod, pv string) string {
	e.t.Helper()
	blockDir := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices")
	link := filepath.Join(e.root, "pods", string(pod.UID), "volumeDevices", "kubernetes.io~csi", pv)
	publish := filepath.Join(blockDir, "publish", pv, string(pod.UID))
	if got, err := os.Readlink(link); err != nil || got != publish {
		e.t.Fatalf("pod link %s -> %q, %v; want %s", link, got, err, publish)
	}
	fi, err := os.Stat(link)
	if err != nil {
		e.t.Fatal(err)
	}
	if fi.Mode()&os.ModeDevice == 0 {
		e.t.Errorf("%s leads to %v, not a block device", link, fi.Mode())
	}
	if ref := filepath.Join(blockDir, pv, "dev", string(pod.UID)); !isMountPoint(ref) {
		e.t.Errorf("%s is not the bind mount that holds the device", ref)
	}
	if _, err := os.Stat(filepath.Join(blockDir, pv, "data", "vol_data.json")); err != nil {
		e.t.Errorf("block vol_data.json: %v", err)
	}
	return link
}

func writeDevice(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readDevice(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, 0)
	return buf, err
}
