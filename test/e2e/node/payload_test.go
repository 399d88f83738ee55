package node_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A configMap item path that cleans to the writer's own name ("./..data", which the API
// server accepts) gets a FailedMount event naming the path and nothing on disk; the agent
// keeps serving the other volumes of the ConfigMap, and a pod with a valid path mounts it.
// ("./..foo" is published as "..foo", as the kubelet does.) On main the bad volume turned
// ..data into a link to itself and reported the volume ready.
func TestPayloadReservedPath(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	ctx := a.ctx(3 * time.Minute)
	cms := a.client.CoreV1().ConfigMaps(a.ns)
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	mustf(t, err, "create configmap")
	cmVol := func(items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: items}}}
	}

	good := a.create(a.pod("good", cmVol()))
	good = a.waitPod(good.Name, time.Minute, "volumes ready", volumesReady)
	goodDir := a.volumeDir(good, "kubernetes.io~configmap", "v")

	bad := a.create(a.pod("dotdata", cmVol(corev1.KeyToPath{Key: "k", Path: "x"}, corev1.KeyToPath{Key: "k", Path: "./..data"})))
	a.waitEvent(bad.Name, "FailedMount", `"./..data"`, time.Minute)
	bad = a.waitPod(bad.Name, time.Minute, "volumes not ready", func(p *corev1.Pod) bool { return condition(p) == corev1.ConditionFalse })
	if _, err := os.Lstat(a.volumeDir(bad, "kubernetes.io~configmap", "v")); !os.IsNotExist(err) {
		t.Errorf("refused volume left on disk: %v", err)
	}

	// The agent still serves the good volume: an update reaches it.
	_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v2"}}, metav1.UpdateOptions{})
	mustf(t, err, "update configmap")
	waitFileWithin(t, filepath.Join(goodDir, "k"), "v2", 2*time.Minute)

	// Item paths are in the pod spec, so the fix is a pod with a valid path; the bad pod
	// goes away cleanly.
	mustf(t, a.client.CoreV1().Pods(a.ns).Delete(ctx, bad.Name, metav1.DeleteOptions{}), "delete bad pod")
	a.waitGone(bad.Name, time.Minute)
	fixed := a.create(a.pod("fixed", cmVol(corev1.KeyToPath{Key: "k", Path: "data"}, corev1.KeyToPath{Key: "k", Path: "./..foo"})))
	fixed = a.waitPod(fixed.Name, time.Minute, "volumes ready", volumesReady)
	fixedDir := a.volumeDir(fixed, "kubernetes.io~configmap", "v")
	for _, name := range []string{"data", "..foo"} {
		if got := readFile(t, filepath.Join(fixedDir, name)); got != "v2" {
			t.Errorf("%s = %q", name, got)
		}
	}
	checkDataLinks(t, a.root)
}

// checkDataLinks: every ..data link under root points to a timestamped directory that
// exists (a looped or dangling one is what the old writer left).
func checkDataLinks(t *testing.T, root string) {
	t.Helper()
	ts := regexp.MustCompile(`^\.\.[0-9]{4}(_[0-9]{2}){5}\.[^/]+$`)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "..data" {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil || !ts.MatchString(target) {
			t.Errorf("%s -> %q (%v)", p, target, err)
		} else if info, err := os.Stat(p); err != nil || !info.IsDir() {
			t.Errorf("%s does not resolve to a directory: %v", p, err)
		}
		return nil
	})
}

func waitFileWithin(t *testing.T, path, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil && string(data) == want {
			return
		}
		if time.Now().After(deadline) {
			data, err := os.ReadFile(path)
			t.Fatalf("%s = %q (%v), want %q", path, data, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
