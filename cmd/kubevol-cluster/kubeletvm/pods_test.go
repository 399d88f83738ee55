package kubeletvm

import (
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// fakeKubelet is the kubelet's pod manager and pod state provider.
type fakeKubelet struct {
	mu                   sync.Mutex
	pods                 []*v1.Pod
	terminating, removed map[types.UID]bool
}

func (f *fakeKubelet) GetPods() []*v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*v1.Pod(nil), f.pods...)
}

func (f *fakeKubelet) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	for _, p := range f.GetPods() {
		if p.UID == uid {
			return p, true
		}
	}
	return nil, false
}

func (f *fakeKubelet) ShouldPodContainersBeTerminating(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminating[uid]
}

func (f *fakeKubelet) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removed[uid]
}

type recorded struct{ events []string }

func (r *recorded) handler() cache.ResourceEventHandler {
	name := func(obj any) string { return obj.(*v1.Pod).Name }
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.events = append(r.events, "add "+name(obj)) },
		UpdateFunc: func(_, obj any) { r.events = append(r.events, "update "+name(obj)) },
		DeleteFunc: func(obj any) { r.events = append(r.events, "delete "+name(obj)) },
	}
}

func (r *recorded) take() []string { e := r.events; r.events = nil; return e }

func same(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The kubelet's pods have no events: the source polls them and tells what changed, a pod
// gone only once every source is seen, and again when its runtime is removed.
func TestPodSourceDiffsThePodManager(t *testing.T) {
	k := &fakeKubelet{terminating: map[types.UID]bool{}, removed: map[types.UID]bool{}}
	p1 := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns", UID: "u1"}}
	k.pods = []*v1.Pod{p1}
	s := newPodSource(k, k)
	var r recorded
	_ = s.AddEventHandler(r.handler())
	ready := false
	s.setReady(func() bool { return ready })

	s.poll()
	if got := r.take(); !same(got, []string{"add p1"}) || s.HasSynced() {
		t.Fatalf("first poll: %v, synced %v", got, s.HasSynced())
	}
	k.pods = nil
	s.poll()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("a pod missing before the sources are ready was deleted: %v", got)
	}
	ready = true
	k.pods = []*v1.Pod{p1}
	s.poll()
	if got := r.take(); len(got) != 0 || !s.HasSynced() {
		t.Fatalf("nothing changed: %v, synced %v", got, s.HasSynced())
	}
	if p, err := s.GetPod("ns", "p1"); err != nil || p != p1 {
		t.Fatalf("GetPod: %v %v", p, err)
	}

	k.terminating["u1"] = true
	s.poll()
	if got := r.take(); !same(got, []string{"update p1"}) {
		t.Fatalf("terminating: %v", got)
	}
	p1b := p1.DeepCopy()
	k.pods = []*v1.Pod{p1b}
	s.poll()
	if got := r.take(); !same(got, []string{"update p1"}) {
		t.Fatalf("new object: %v", got)
	}
	k.pods = nil
	s.poll()
	if got := r.take(); !same(got, []string{"delete p1"}) {
		t.Fatalf("gone: %v", got)
	}
	s.poll()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("gone, nothing new: %v", got)
	}
	k.removed["u1"] = true
	s.poll()
	if got := r.take(); !same(got, []string{"delete p1"}) {
		t.Fatalf("runtime removed: %v", got)
	}
	if _, err := s.GetPod("ns", "p1"); err == nil {
		t.Fatal("GetPod found a pod the kubelet no longer has")
	}
}
