package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The views show what each pod wants and what is mounted where, and, after a restart,
// which mounts were only found on disk.
func TestStateViews(t *testing.T) {
	h := newHarness(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"k": "v"}})
	h.start()
	h.create(pod("v", "uid-v", cmVolume("cfg", "cm"), emptyDirVolume("cache")))
	h.eventually("ready", func() bool { return h.m.PodVolumesReady("uid-v") })

	cfgName, cacheName := podScopedName("kubernetes.io/configmap", "uid-v", "cfg"), podScopedName("kubernetes.io/empty-dir", "uid-v", "cache")
	cfgPath := filepath.Join(h.root, "pods/uid-v/volumes/kubernetes.io~configmap/cfg")
	pods := h.m.DesiredState().Pods()
	if len(pods) != 1 || pods[0].Pod.UID != "uid-v" || len(pods[0].Errors) != 0 || len(pods[0].Volumes) != 2 ||
		pods[0].Volumes[0].Name != cfgName || pods[0].Volumes[1].Name != cacheName || pods[0].Volumes[0].OuterNames[0] != "cfg" {
		t.Fatalf("desired state %+v", pods)
	}
	vols := h.m.ActualState().Volumes()
	if len(vols) != 2 || vols[0].Name != cfgName || vols[1].Name != cacheName {
		t.Fatalf("actual state %+v", vols)
	}
	for _, v := range vols {
		if len(v.Mounts) != 1 || v.Mounts[0].PodUID != "uid-v" || v.Mounts[0].State != VolumeMounted || v.Mounts[0].Reconstructed {
			t.Errorf("mounts of %s: %+v", v.Name, v.Mounts)
			continue
		}
		if _, err := os.Stat(v.Mounts[0].MountPath); err != nil {
			t.Errorf("mount path of %s: %v", v.Name, err)
		}
	}
	if got := vols[0].Mounts[0].MountPath; got != cfgPath {
		t.Errorf("configMap mount path %q, want %q", got, cfgPath)
	}
	// A copy: changing it changes nothing in the manager.
	vols[0].Mounts[0].MountPath = "x"
	pods[0].Volumes[0].OuterNames = nil
	if mv, _ := h.m.ActualState().PodVolume("uid-v", cfgName); mv.MountPath != cfgPath {
		t.Errorf("the view shares its mounts: %q", mv.MountPath)
	}
	if dv := h.m.DesiredState().PodVolumes("uid-v"); len(dv[0].OuterNames) != 1 {
		t.Error("the view shares its volumes")
	}

	// Restarted without the ConfigMap, the volume found on disk cannot be set up again: it
	// stays reconstructed, at the same path.
	h.stop()
	if err := h.client.CoreV1().ConfigMaps("ns").Delete(context.Background(), "cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.obs = newObserver()
	h.start()
	h.eventually("failure reported", func() bool { return h.obs.get(func(o *observer) bool { return o.failed["uid-v"] != "" }) })
	for _, v := range h.m.ActualState().Volumes() {
		if v.Name != cfgName {
			continue
		}
		if len(v.Mounts) != 1 || !v.Mounts[0].Reconstructed || v.Mounts[0].State != VolumeMountUncertain || v.Mounts[0].MountPath != cfgPath {
			t.Errorf("reconstructed mounts %+v", v.Mounts)
		}
		return
	}
	t.Error("reconstructed volume missing from the view")
}
