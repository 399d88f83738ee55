package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"POD": "p1", "NS": "ns"}
	for in, want := range map[string]string{
		"$(NS)/$(POD)": "ns/p1", "$(MISSING)/x": "$(MISSING)/x", "$$(POD)": "$(POD)", "a$": "a$", "$(POD": "$(POD",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSubpaths(t *testing.T) {
	h := newHarness(t)
	h.start()
	host := t.TempDir()
	os.Symlink("/etc", filepath.Join(host, "escape"))

	good := pod("good", "uid-good", emptyDirVolume("data"))
	good.Spec.Containers[0].VolumeMounts[0].SubPathExpr = "$(POD_NAME)/logs"
	good.Spec.Containers[0].Env = []v1.EnvVar{{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	h.create(good)
	h.eventually("good ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-good"] == 1 }) })
	target := filepath.Join(h.root, "pods/uid-good/volume-subpaths/data/c/0")
	if ok, _ := h.mounter.IsMountPoint(target); !ok {
		t.Errorf("subPath not bind-mounted at %s", target)
	}
	if info, err := os.Stat(filepath.Join(h.root, "pods/uid-good/volumes/kubernetes.io~empty-dir/data/good/logs")); err != nil || !info.IsDir() {
		t.Errorf("subPathExpr directory not created: %v", err)
	}

	bad := pod("bad", "uid-bad", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host}}})
	bad.Spec.Containers[0].VolumeMounts[0].SubPath = "escape"
	h.create(bad)
	h.eventually("refused", func() bool {
		return h.obs.get(func(o *observer) bool { return strings.Contains(o.failed["uid-bad"], "escapes the volume") })
	})

	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "good", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("torn down", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid-good"] == 1 }) })
	if ok, _ := h.mounter.IsMountPoint(target); ok {
		t.Error("subPath mount left after teardown")
	}
}

// An image volume's subPath is the runtime's (the image is mounted by it, upstream
// kubelet_pods.go hands it the subPath): the manager prepares nothing for it, and above all
// does not resolve the subPath against its own working directory (the plugin's Path is "").
func TestImageVolumeSubpathIsTheRuntimes(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	h := newHarness(t)
	h.start()
	p := pod("img", "uid-img", v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "example.com/data:1"}}})
	p.Spec.Containers[0].VolumeMounts[0].SubPath = "made/here"
	h.create(p)
	h.eventually("image pod ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-img"] == 1 }) })
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Errorf("subPath prepared in the working directory: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid-img/volume-subpaths")); err == nil {
		t.Error("volume-subpaths made for an image volume")
	}
	if mps, _ := h.mounter.List(); len(mps) != 0 {
		t.Errorf("mounts %+v", mps)
	}
}
