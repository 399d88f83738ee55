package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// kubeletPods is a PodLifecycle over the API pods, whose answers the test sets, as a
// kubelet's pod workers would give them.
type kubeletPods struct {
	PodSource
	mu                   sync.Mutex
	terminating, removed map[types.UID]bool
	// asked counts the ContainersTerminating questions per pod: the manager asks one when
	// it has decided to keep what the pod has.
	asked map[types.UID]int
}

func (k *kubeletPods) askedOf(uid types.UID) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked[uid]
}

func (k *kubeletPods) set(uid types.UID, terminating, removed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.terminating[uid], k.removed[uid] = terminating, removed
}

func (k *kubeletPods) ContainersTerminating(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked[uid]++
	return k.terminating[uid]
}

func (k *kubeletPods) RuntimeRemoved(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.removed[uid]
}

// touch updates the pod, which a PodLifecycle source must do when its answers change.
func touch(t *testing.T, h *harness, p *v1.Pod, change func(*v1.Pod)) {
	t.Helper()
	cur, err := h.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels["touched"] = time.Now().Format("150405.000000")
	if change != nil {
		change(cur)
	}
	if _, err := h.client.CoreV1().Pods(p.Namespace).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// In a kubelet, a pod's volumes stay while its containers run, through its deletionTimestamp
// and until the kubelet says its runtime is gone; a pod whose containers are terminating
// gets no new volumes; subPaths are left to the kubelet.
func TestKubeletPodLifecycle(t *testing.T) {
	h := newHarness(t)
	pods := &kubeletPods{PodSource: NewAPIPodSource(h.client, "node1"), terminating: map[types.UID]bool{}, removed: map[types.UID]bool{}, asked: map[types.UID]int{}}
	h.pods, h.inKubelet = pods, true
	h.start()

	p := pod("p1", "uid1", emptyDirVolume("scratch"))
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "scratch", MountPath: "/sub", SubPath: "s"})
	h.create(p)
	h.ready("uid1")
	for _, mp := range h.mounter.MountPoints {
		if strings.Contains(mp.Path, "volume-subpaths") {
			t.Errorf("subPath mounted by the volume manager in a kubelet: %s", mp.Path)
		}
	}

	// stays checks, once the manager has looked at the pod after the change (asked is the
	// count of questions before it), that its volumes are still there.
	stays := func(when string, asked int) {
		t.Helper()
		h.eventually("the manager to look at the pod "+when, func() bool { return pods.askedOf("uid1") > asked })
		if !h.m.PodHasPossiblyMountedVolumes("uid1") || h.obs.get(func(o *observer) bool { return o.tornDown["uid1"] > 0 }) {
			t.Fatalf("volumes torn down %s", when)
		}
	}
	now := metav1.Now()
	asked := pods.askedOf("uid1")
	touch(t, h, p, func(p *v1.Pod) { p.DeletionTimestamp = &now })
	stays("at the deletionTimestamp, with containers running", asked)
	pods.set("uid1", true, false)
	asked = pods.askedOf("uid1")
	touch(t, h, p, nil)
	stays("while the containers terminate", asked)

	// A new pod whose containers will not start gets nothing.
	q := pod("p2", "uid2", emptyDirVolume("scratch"))
	pods.set("uid2", true, false)
	h.create(q)
	h.eventually("the manager to look at the new pod", func() bool { return pods.askedOf("uid2") > 0 })
	if len(h.m.DesiredState().PodVolumes("uid2")) > 0 || h.m.PodHasPossiblyMountedVolumes("uid2") {
		t.Error("volumes set up for a pod whose containers are terminating")
	}

	pods.set("uid1", true, true)
	touch(t, h, p, nil)
	h.eventually("torn down once the runtime is removed", func() bool { return !h.m.PodHasPossiblyMountedVolumes("uid1") })
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid1/volumes/kubernetes.io~empty-dir/scratch")); !os.IsNotExist(err) {
		t.Errorf("the emptyDir is still there: %v", err)
	}
}
