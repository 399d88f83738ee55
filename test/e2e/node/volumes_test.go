package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

const tmpfsMagic = 0x01021994

// One pod with every plugin: files, modes, owners, media; then live updates; then deletion
// tears everything down and the agent completes the deletion.
func TestEveryPluginMountsUpdatesAndTearsDown(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	ctx := a.ctx(3 * time.Minute)
	cms := a.client.CoreV1().ConfigMaps(a.ns)
	secrets := a.client.CoreV1().Secrets(a.ns)
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"bin": {0, 255}}}, metav1.CreateOptions{})
	mustf(t, err, "create configmap")
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"password": []byte("s3cret")}}, metav1.CreateOptions{})
	mustf(t, err, "create secret")
	hostDir := filepath.Join(a.root, "host", "created")

	p := a.pod("all",
		corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items:                []corev1.KeyToPath{{Key: "a", Path: "dir/a", Mode: ptr.To(int32(0o600))}, {Key: "bin", Path: "bin"}},
		}}},
		corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec", DefaultMode: ptr.To(int32(0o400))}}},
		corev1.Volume{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
		}}}},
		corev1.Volume{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3600))}},
		}}}},
		corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("16Mi"))}}},
		corev1.Volume{Name: "disk", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}},
	)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(2000)), RunAsUser: ptr.To(int64(1000))}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	// The default service account appears shortly after the namespace.
	waitServiceAccount(t, a)
	p = a.create(p)
	p = a.waitPod(p.Name, time.Minute, "volumes ready", volumesReady)
	if p.Spec.NodeName != a.name {
		t.Fatalf("scheduled to %q, want %q", p.Spec.NodeName, a.name)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s: the agent runs no containers and must leave the pod Pending", p.Status.Phase)
	}
	a.waitEvent(p.Name, "SuccessfulMountVolume", "", 10*time.Second)

	check := func(path, want string, mode os.FileMode, gid int) {
		t.Helper()
		if got := readFile(t, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
		info, err := os.Stat(path)
		mustf(t, err, "stat")
		if mode != 0 && info.Mode().Perm() != mode {
			t.Errorf("%s mode %v, want %v", path, info.Mode().Perm(), mode)
		}
		if st := info.Sys().(*syscall.Stat_t); gid >= 0 && int(st.Gid) != gid {
			t.Errorf("%s gid %d, want %d", path, st.Gid, gid)
		}
	}
	cfgDir := a.volumeDir(p, "kubernetes.io~configmap", "cfg")
	check(filepath.Join(cfgDir, "dir/a"), "1", 0o640, 2000) // 0600, plus g+r from fsGroup on a read-only volume
	check(filepath.Join(cfgDir, "bin"), "\x00\xff", 0, 2000)
	if _, err := os.Lstat(filepath.Join(cfgDir, "b")); !os.IsNotExist(err) {
		t.Errorf("key b projected without an item")
	}
	secDir := a.volumeDir(p, "kubernetes.io~secret", "sec")
	check(filepath.Join(secDir, "password"), "s3cret", 0o440, 2000)
	downDir := a.volumeDir(p, "kubernetes.io~downward-api", "down")
	check(filepath.Join(downDir, "labels"), `app="all"`, 0, -1)
	check(filepath.Join(downDir, "name"), "all", 0, -1)
	check(filepath.Join(downDir, "mem"), "64", 0, -1)
	projDir := a.volumeDir(p, "kubernetes.io~projected", "proj")
	check(filepath.Join(projDir, "b"), "2", 0, -1)
	check(filepath.Join(projDir, "password"), "s3cret", 0, -1)
	tok := readFile(t, filepath.Join(projDir, "token"))
	if strings.Count(tok, ".") != 2 {
		t.Errorf("token is not a JWT: %d bytes", len(tok))
	}
	if info, _ := os.Stat(filepath.Join(projDir, "token")); info.Mode().Perm()&0o007 != 0 || info.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("token mode %v uid %d, want private to runAsUser 1000", info.Mode().Perm(), info.Sys().(*syscall.Stat_t).Uid)
	}
	for _, d := range []string{secDir, downDir, projDir, a.volumeDir(p, "kubernetes.io~empty-dir", "mem")} {
		var st syscall.Statfs_t
		if err := syscall.Statfs(d, &st); err != nil || st.Type != tmpfsMagic {
			t.Errorf("%s is not a tmpfs", d)
		}
	}
	var st syscall.Statfs_t
	mustf(t, syscall.Statfs(a.volumeDir(p, "kubernetes.io~empty-dir", "mem"), &st), "statfs")
	if size := st.Blocks * uint64(st.Bsize); size != 16<<20 {
		t.Errorf("memory emptyDir size %d, want sizeLimit 16Mi (below the 64Mi limit)", size)
	}
	diskDir := a.volumeDir(p, "kubernetes.io~empty-dir", "disk")
	if info, err := os.Stat(diskDir); err != nil || info.Mode().Perm() != 0o777 || info.Mode()&os.ModeSetgid == 0 {
		t.Errorf("disk emptyDir %v %v, want 0777 with setgid for fsGroup", info.Mode(), err)
	}
	if info, err := os.Stat(hostDir); err != nil || !info.IsDir() {
		t.Errorf("hostPath DirectoryOrCreate: %v", err)
	}

	// Live updates: ConfigMap, Secret and labels reach the files in well under a second.
	start := time.Now()
	_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"a": "one", "b": "two"}, BinaryData: map[string][]byte{"bin": {1}}}, metav1.UpdateOptions{})
	mustf(t, err, "update configmap")
	waitFile(t, filepath.Join(cfgDir, "dir/a"), "one")
	waitFile(t, filepath.Join(projDir, "b"), "two")
	t.Logf("configMap update propagated in %v", time.Since(start))
	start = time.Now()
	_, err = secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"password": []byte("rotated")}}, metav1.UpdateOptions{})
	mustf(t, err, "update secret")
	waitFile(t, filepath.Join(secDir, "password"), "rotated")
	t.Logf("secret update propagated in %v", time.Since(start))
	start = time.Now()
	patch := []byte(`{"metadata":{"labels":{"app":"all","tier":"x"}}}`)
	_, err = a.client.CoreV1().Pods(a.ns).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	mustf(t, err, "label pod")
	waitFile(t, filepath.Join(downDir, "labels"), "app=\"all\"\ntier=\"x\"")
	t.Logf("label update propagated in %v", time.Since(start))

	metrics := scrape(t, a.metricsAddr, "/metrics")
	for _, want := range []string{"storage_operation_duration_seconds_bucket", `volume_manager_total_volumes{plugin_name="kubernetes.io/configmap",state="actual_state_of_world"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Deletion: the agent unmounts, removes the pod directory, then deletes the pod.
	mustf(t, a.client.CoreV1().Pods(a.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}), "delete pod")
	a.waitGone(p.Name, time.Minute)
	if _, err := os.Stat(filepath.Join(a.root, "pods", string(p.UID))); !os.IsNotExist(err) {
		t.Errorf("pod directory left: %v", err)
	}
	if m := kubecheck.MountsUnder(a.root); len(m) > 0 {
		t.Errorf("mounts left after deletion: %v", m)
	}
	if _, err := os.Stat(hostDir); err != nil {
		t.Errorf("hostPath content removed by teardown: %v", err)
	}
}

func waitServiceAccount(t *testing.T, a *agent) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := a.client.CoreV1().ServiceAccounts(a.ns).Get(context.Background(), "default", metav1.GetOptions{}); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no default service account")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	waitFileWithin(t, path, want, 10*time.Second)
}

func scrape(t *testing.T, addr, path string) string {
	t.Helper()
	return framework.Get(t, "http://"+addr+path)
}

// The Node carries what kube-scheduler and the attach/detach controller need.
func TestNodeRegistration(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	ctx := a.ctx(time.Minute)
	n, err := a.client.CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
	mustf(t, err, "get node")
	if n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] != "true" {
		t.Errorf("annotations %v", n.Annotations)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		if q := n.Status.Allocatable[r]; q.IsZero() {
			t.Errorf("allocatable %s missing: %v", r, n.Status.Allocatable)
		}
	}
	if n.Labels[corev1.LabelHostname] != a.name {
		t.Errorf("labels %v", n.Labels)
	}
	var l *coordinationv1.Lease
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err = a.client.CoordinationV1().Leases("kube-node-lease").Get(ctx, a.name, metav1.GetOptions{})
		return err == nil && len(l.OwnerReferences) > 0, nil
	})
	mustf(t, err, "wait for the node lease")
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != a.name || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID {
		t.Errorf("lease %+v", l)
	}
	// The Node is registered before the volume manager's first pass ends, and /healthz
	// says ok only after it: wait for it.
	var body string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		body, err = kubecheck.Get("http://" + a.metricsAddr + "/healthz")
		return err == nil, nil
	})
	if err != nil || !strings.Contains(body, "ok") {
		t.Errorf("/healthz: %q, %v", body, err)
	}
}

// A terminal pod's volumes are torn down; the pod itself stays (pod GC's job).
func TestTerminalPodTornDown(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	p := a.create(a.pod("done", corev1.Volume{Name: "m", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}))
	p = a.waitPod(p.Name, time.Minute, "volumes ready", volumesReady)
	p.Status.Phase = corev1.PodSucceeded
	_, err := a.client.CoreV1().Pods(a.ns).UpdateStatus(a.ctx(time.Minute), p, metav1.UpdateOptions{})
	mustf(t, err, "mark succeeded")
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := os.Stat(filepath.Join(a.root, "pods", string(p.UID)))
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("terminal pod not torn down")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m := kubecheck.MountsUnder(a.root); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := a.client.CoreV1().Pods(a.ns).Get(a.ctx(time.Minute), p.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("terminal pod deleted by the agent: %v", err)
	}
}

// A disk-backed emptyDir that outgrows its sizeLimit is reported with upstream's eviction
// message (the kubelet would evict the pod; the agent has no containers to stop).
func TestEmptyDirSizeLimitReported(t *testing.T) {
	t.Parallel()
	a := startAgent(t, "--emptydir-size-interval", "1s")
	p := a.create(a.pod("big", corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}}))
	p = a.waitPod(p.Name, time.Minute, "volumes ready", volumesReady)
	mustf(t, os.WriteFile(filepath.Join(a.volumeDir(p, "kubernetes.io~empty-dir", "scratch"), "blob"), make([]byte, 2<<20), 0o644), "fill the emptyDir")
	a.waitEvent(p.Name, "EmptyDirSizeLimitExceeded", `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi"`, 30*time.Second)
}
