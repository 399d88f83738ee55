package node_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// A subPath is bind-mounted where the kubelet puts it; one that is a symlink out of its
// volume is refused with an event (CVE-2017-1002101), and nothing is mounted for it.
func TestSubpaths(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	host := filepath.Join(a.root, "host")
	mustf(t, os.MkdirAll(host, 0o755), "mkdir")
	mustf(t, os.Symlink("/etc", filepath.Join(host, "escape")), "symlink")

	good := a.pod("good", corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	good.Spec.Containers[0].VolumeMounts[0].SubPathExpr = "$(POD_NAME)"
	good.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	good = a.create(good)
	good = a.waitPod(good.Name, time.Minute, "volumes ready", volumesReady)
	target := filepath.Join(a.root, "pods", string(good.UID), "volume-subpaths", "data", "c", "0")
	if _, ok := kubecheck.MountIDs(a.root)[target]; !ok {
		t.Errorf("subPath not bind-mounted at %s", target)
	}
	mustf(t, os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644), "write through the subPath mount")
	if got := readFile(t, filepath.Join(a.volumeDir(good, "kubernetes.io~empty-dir", "data"), "good", "f")); got != "x" {
		t.Errorf("subPath mount does not show the volume's %q directory", "good")
	}

	bad := a.pod("bad", corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}})
	bad.Spec.Containers[0].VolumeMounts[0].SubPath = "escape"
	bad = a.create(bad)
	a.waitEvent(bad.Name, "FailedMount", "subPath escapes the volume", time.Minute)
	a.waitPod(bad.Name, 10*time.Second, "condition False", func(p *corev1.Pod) bool { return condition(p) == corev1.ConditionFalse })
	for mp := range kubecheck.MountIDs(a.root) {
		if filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(mp)))) == filepath.Join(a.root, "pods", string(bad.UID)) {
			t.Errorf("refused subPath mounted at %s", mp)
		}
	}
}
