package volumemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/runtime/controller/queuetest"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
)

type observer struct {
	mu       sync.Mutex
	ready    map[types.UID]int
	failed   map[types.UID]string
	tornDown map[types.UID]int
}

func newObserver() *observer {
	return &observer{ready: map[types.UID]int{}, failed: map[types.UID]string{}, tornDown: map[types.UID]int{}}
}

func (o *observer) VolumesReady(pod *v1.Pod) { o.mu.Lock(); o.ready[pod.UID]++; o.mu.Unlock() }
func (o *observer) VolumesFailed(pod *v1.Pod, msg string) {
	o.mu.Lock()
	o.failed[pod.UID] = msg
	o.mu.Unlock()
}
func (o *observer) VolumesTornDown(pod *v1.Pod) { o.mu.Lock(); o.tornDown[pod.UID]++; o.mu.Unlock() }

func (o *observer) get(f func(o *observer) bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return f(o)
}

type harness struct {
	t       *testing.T
	client  *fake.Clientset
	root    string
	mounter *mount.FakeMounter
	obs     *observer
	m       *Manager
	cancel  context.CancelFunc
	done    chan struct{}
	extra   []volume.Plugin
	// inUseChanged, if set, is the manager's VolumesInUseChanged.
	inUseChanged func()
	// recorder and registerer, if set, are the manager's Recorder and Registerer.
	recorder   record.EventRecorder
	registerer prometheus.Registerer
	// ownRegistry is set when registerer is the harness's, made by start.
	ownRegistry bool
	// seLinux, if set, is the manager's SELinuxEnabled.
	seLinux *bool
	// claimSync, if set, is the manager's ClaimSyncPeriod.
	claimSync time.Duration
	// pods and inKubelet, if set, are the manager's Pods and InKubelet.
	pods      PodSource
	inKubelet bool
}

func newHarness(t *testing.T, objs ...any) *harness {
	h := &harness{t: t, root: t.TempDir(), mounter: mount.NewFakeMounter(nil), obs: newObserver()}
	var ros []interface{ GetName() string }
	_ = ros
	h.client = fake.NewClientset()
	h.client.PrependReactor("*", "*", nodeRestricted(t, "node1"))
	for _, o := range objs {
		h.create(o)
	}
	return h
}

// nodeRestricted fails the test on any list or watch the Node authorizer refuses a node:
// pods only with spec.nodeName=<node>, ConfigMaps and Secrets only of one object by
// metadata.name, nothing of claims, volumes or VolumeAttachments.
func nodeRestricted(t *testing.T, node string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		verb, res := a.GetVerb(), a.GetResource().Resource
		if verb != "list" && verb != "watch" {
			return false, nil, nil
		}
		var sel fields.Selector = fields.Everything()
		switch a := a.(type) {
		case k8stesting.ListAction:
			sel = a.GetListRestrictions().Fields
		case k8stesting.WatchAction:
			sel = a.GetWatchRestrictions().Fields
		}
		name, byName := sel.RequiresExactMatch("metadata.name")
		nodeName, byNode := sel.RequiresExactMatch("spec.nodeName")
		switch {
		case res == "pods" && byNode && nodeName == node:
		case (res == "configmaps" || res == "secrets") && byName && name != "":
		case res == "csidrivers" || res == "clustertrustbundles":
		default:
			t.Errorf("%s of %s with fields %q: the Node authorizer refuses it", verb, res, sel)
		}
		return false, nil, nil
	}
}

func (h *harness) create(o any) {
	h.t.Helper()
	ctx := context.Background()
	var err error
	switch o := o.(type) {
	case *v1.ConfigMap:
		_, err = h.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *v1.Secret:
		_, err = h.client.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *v1.Pod:
		_, err = h.client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("unsupported %T", o)
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) start() {
	h.t.Helper()
	if h.registerer == nil || h.ownRegistry {
		// A registry of each manager's own, for settle: a restarted one registers anew.
		h.registerer, h.ownRegistry = prometheus.NewRegistry(), true
	}
	m, err := New(Config{
		Client: h.client, NodeName: "node1", Paths: volume.Paths{Root: h.root},
		Plugins: append(plugins.All(), h.extra...), Mounter: h.mounter, Observer: h.obs, Workers: 2,
		VolumesInUseChanged: h.inUseChanged, Recorder: h.recorder, Registerer: h.registerer,
		SELinuxEnabled: h.seLinux, ClaimSyncPeriod: h.claimSync, Pods: h.pods, InKubelet: h.inKubelet,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() { defer close(h.done); _ = m.Run(ctx) }()
	h.t.Cleanup(h.stop)
	select {
	case <-m.Initialized():
	case <-time.After(10 * time.Second):
		h.t.Fatal("manager did not initialize")
	}
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

// settle syncs the pod once more and waits until both of the manager's queues have
// finished every key added to them: whatever the manager does for the current state is
// done. A key counts in workqueue_adds_total when it is queued or marked again while in
// flight, and in workqueue_work_duration_seconds when its sync is over, so the two are
// equal exactly when no sync is queued or running. Retries the manager scheduled for later
// are not waited for.
func (h *harness) settle(uid types.UID) {
	h.t.Helper()
	g, ok := h.registerer.(prometheus.Gatherer)
	if !ok {
		h.t.Fatal("settle needs the harness's registerer to be a registry")
	}
	idle := func() (bool, float64) {
		var done float64
		for _, q := range []string{"volumemanager_pods", "volumemanager_devices"} {
			adds := queuetest.Value(h.t, g, "workqueue_adds_total", q)
			m := queuetest.Metric(h.t, g, "workqueue_work_duration_seconds", q)
			n := float64(m.GetHistogram().GetSampleCount())
			if max(adds, 0) != n {
				return false, 0
			}
			done += n
		}
		return true, done
	}
	_, before := idle()
	h.m.Sync(uid)
	h.eventually("the manager's queues to settle", func() bool {
		ok, done := idle()
		return ok && done > before
	})
}

func (h *harness) eventually(what string, f func() bool) {
	h.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return f(), nil }); err != nil {
		h.t.Fatalf("timed out waiting for %s", what)
	}
}

func pod(name string, uid types.UID, vols ...v1.Volume) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid},
		Spec:       v1.PodSpec{NodeName: "node1", Volumes: vols, Containers: []v1.Container{{Name: "c"}}},
	}
	for _, v := range vols {
		if v.Name != "unused" {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
		}
	}
	return p
}

func cmVolume(name, cm string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: cm}}}}
}

func emptyDirVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
}

func fileIs(path, want string) func() bool {
	return func() bool { data, err := os.ReadFile(path); return err == nil && string(data) == want }
}

func TestMountUpdateAndTeardown(t *testing.T) {
	h := newHarness(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"k": "v1"}})
	h.start()
	p := pod("p1", "uid1", cmVolume("cfg", "cm"), emptyDirVolume("cache"), emptyDirVolume("unused"))
	h.create(p)
	h.eventually("volumes ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid1"] == 1 }) })
	cfgFile := filepath.Join(h.root, "pods/uid1/volumes/kubernetes.io~configmap/cfg/k")
	h.eventually("configmap file", fileIs(cfgFile, "v1"))
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid1/volumes/kubernetes.io~empty-dir/unused")); !os.IsNotExist(err) {
		t.Errorf("unused volume was set up: %v", err)
	}
	if !h.m.PodVolumesReady("uid1") {
		t.Error("PodVolumesReady false")
	}

	// A ConfigMap update reaches the file without any pod event.
	_, err := h.client.CoreV1().ConfigMaps("ns").Update(context.Background(),
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "2"}, Data: map[string]string{"k": "v2"}}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("configmap update", fileIs(cfgFile, "v2"))

	// Deletion tears down and removes the pod directory.
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("torn down", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid1"] == 1 }) })
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid1")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}

func TestMissingConfigMapMountsWhenItAppears(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.create(pod("p2", "uid2", cmVolume("cfg", "late")))
	h.eventually("failure reported", func() bool {
		return h.obs.get(func(o *observer) bool { return o.failed["uid2"] != "" })
	})
	// Let the backoff grow a little: the appearance must bypass it. The sleep makes the
	// retries' real delay longer, it waits for no result.
	time.Sleep(1200 * time.Millisecond)
	h.create(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "ns"}, Data: map[string]string{"k": "x"}})
	start := time.Now()
	h.eventually("mounted", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid2"] == 1 }) })
	t.Logf("mounted %v after the ConfigMap appeared", time.Since(start))
}

func TestTerminatingAndTerminalPodsAreTornDown(t *testing.T) {
	h := newHarness(t)
	h.start()
	p := pod("p3", "uid3", emptyDirVolume("scratch"))
	h.create(p)
	h.eventually("ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid3"] == 1 }) })
	p.Status.Phase = v1.PodSucceeded
	if _, err := h.client.CoreV1().Pods("ns").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("torn down", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid3"] == 1 }) })
	// Deleting the terminal pod later is reported again, so its deletion can be finished.
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("ns").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("reported again when deleted", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid3"] == 2 }) })

	q := pod("p4", "uid4", emptyDirVolume("scratch"))
	h.create(q)
	h.eventually("ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid4"] == 1 }) })
	q.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("ns").Update(context.Background(), q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("torn down", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid4"] == 1 }) })
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid4")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}

// After a restart, a wanted volume keeps its data and an unwanted one is cleaned.
func TestReconstruction(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.create(pod("keep", "uid-keep", emptyDirVolume("data")))
	h.create(pod("gone", "uid-gone", emptyDirVolume("data")))
	h.eventually("ready", func() bool {
		return h.obs.get(func(o *observer) bool { return o.ready["uid-keep"] == 1 && o.ready["uid-gone"] == 1 })
	})
	keepFile := filepath.Join(h.root, "pods/uid-keep/volumes/kubernetes.io~empty-dir/data/file")
	if err := os.WriteFile(keepFile, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.stop()
	// While the manager is down, one pod goes away.
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.obs = newObserver()
	h.start()
	if mv, ok := h.m.ActualState().PodVolume("uid-keep", "kubernetes.io/empty-dir/uid-keep-data"); !ok {
		t.Error("wanted volume not reconstructed")
	} else if mv.State == VolumeNotMounted {
		t.Errorf("state %s", mv.State)
	}
	h.eventually("gone pod cleaned", func() bool {
		_, err := os.Stat(filepath.Join(h.root, "pods/uid-gone"))
		return os.IsNotExist(err)
	})
	h.eventually("kept pod ready", func() bool { return h.m.PodVolumesReady("uid-keep") })
	if data, err := os.ReadFile(keepFile); err != nil || string(data) != "precious" {
		t.Errorf("data of a wanted volume lost: %q %v", data, err)
	}
}

// A mount inside a pod's volume that the mount check does not know of (the harness's
// mounter is a fake, so the real tmpfs is invisible to it, as a mount made in between
// would be) is never entered: the teardown stops there and keeps the mounted data, and
// completes once it is gone.
func TestTeardownNeverDeletesMountedData(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.create(pod("p", "uid-m", emptyDirVolume("data")))
	h.eventually("ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-m"] == 1 }) })
	vol := filepath.Join(h.root, "pods/uid-m/volumes/kubernetes.io~empty-dir/data")
	inner := filepath.Join(vol, "inner")
	sibling := filepath.Join(vol, "sibling")
	for _, err := range []error{os.Mkdir(inner, 0o755), os.WriteFile(sibling, nil, 0o644), unix.Mount("tmpfs", inner, "tmpfs", 0, "")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	mounted := true
	unmount := func() {
		if mounted {
			if err := unix.Unmount(inner, 0); err != nil {
				t.Errorf("unmount: %v", err)
			}
			mounted = false
		}
	}
	t.Cleanup(unmount)
	if err := os.WriteFile(filepath.Join(inner, "data"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("teardown tried", func() bool { _, err := os.Lstat(sibling); return os.IsNotExist(err) })
	if data, err := os.ReadFile(filepath.Join(inner, "data")); err != nil || string(data) != "precious" {
		t.Errorf("mounted data deleted: %q %v", data, err)
	}
	if h.obs.get(func(o *observer) bool { return o.tornDown["uid-m"] > 0 }) {
		t.Error("pod reported torn down with a mount left in its volume")
	}
	unmount()
	h.eventually("torn down", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid-m"] == 1 }) })
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid-m")); !os.IsNotExist(err) {
		t.Errorf("pod dir left: %v", err)
	}
}

// A volume directory that no plugin can tear down (its plugin is unknown, so there is no
// record of what it is) stays with its data, after reconstruction and after the pod
// directory cleanup, which does remove the pod's known volumes.
func TestUnknownVolumeDataIsKept(t *testing.T) {
	h := newHarness(t)
	pd := filepath.Join(h.root, "pods/uid-u/volumes")
	known := filepath.Join(pd, "kubernetes.io~empty-dir/e")
	file := filepath.Join(pd, "zz.example.com~unknown/v/file") // sorted after the known one
	for _, d := range []string{known, filepath.Dir(file)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.eventually("cleanup tried", func() bool { _, err := os.Lstat(known); return os.IsNotExist(err) })
	if data, err := os.ReadFile(file); err != nil || string(data) != "precious" {
		t.Errorf("data without a record deleted: %q %v", data, err)
	}
}
