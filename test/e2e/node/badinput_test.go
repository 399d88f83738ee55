package node_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Bad input gets a FailedMount event and the condition False, and nothing is written
// outside the volume; a missing ConfigMap mounts as soon as it appears.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	ctx := a.ctx(3 * time.Minute)
	_, err := a.client.CoreV1().ConfigMaps(a.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	mustf(t, err, "create configmap")

	t.Run("item path escapes the volume", func(t *testing.T) {
		// The API server already refuses such pods; the agent refuses them again
		// (atomicwriter.ValidatePath, unit-tested), so nothing reaches the disk either way.
		for _, bad := range []string{"../escape", "/etc/escape", "a/../../escape"} {
			p := a.pod("evil", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "k", Path: bad}}}}})
			if _, err := a.client.CoreV1().Pods(a.ns).Create(ctx, p, metav1.CreateOptions{}); err == nil {
				t.Errorf("pod with item path %q accepted", bad)
			}
		}
		if _, err := os.Stat(filepath.Join(a.root, "escape")); !os.IsNotExist(err) {
			t.Errorf("a file was written outside the volume: %v", err)
		}
	})

	t.Run("hostPath type mismatch", func(t *testing.T) {
		file := filepath.Join(a.root, "a-file")
		mustf(t, os.WriteFile(file, nil, 0o644), "write")
		p := a.create(a.pod("hp", corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: file, Type: ptr.To(corev1.HostPathDirectory)}}}))
		a.waitEvent(p.Name, "FailedMount", "is not a directory", time.Minute)
	})

	t.Run("missing configmap mounts when it appears", func(t *testing.T) {
		p := a.create(a.pod("late", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "late"}}}}))
		a.waitEvent(p.Name, "FailedMount", `configmap "late" not found`, time.Minute)
		time.Sleep(3 * time.Second) // let the backoff grow past the appearance
		start := time.Now()
		_, err := a.client.CoreV1().ConfigMaps(a.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		mustf(t, err, "create configmap")
		p = a.waitPod(p.Name, 30*time.Second, "volumes ready", volumesReady)
		t.Logf("mounted %v after the ConfigMap was created", time.Since(start))
		if got := readFile(t, filepath.Join(a.volumeDir(p, "kubernetes.io~configmap", "v"), "k")); got != "v" {
			t.Errorf("k = %q", got)
		}
	})
}
