package kubeletvm

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	kvm "k8s.io/kubernetes/pkg/kubelet/volumemanager"

	"github.com/kubevol/kubevol/pkg/volumemanager"
)

// podPollPeriod is how often the kubelet's pod manager is read: it has no events, so the
// source lists it and sends what changed, as upstream's populator loop does every 100 ms.
const podPollPeriod = 100 * time.Millisecond

// podSource delivers the kubelet's pods to the volume manager. It is a
// volumemanager.PodLifecycle: a pod's volumes go when the kubelet says its containers are
// gone, not at its deletionTimestamp.
type podSource struct {
	pods  kvm.PodManager
	state kvm.PodStateProvider

	mu       sync.Mutex
	ready    func() bool // the kubelet's sourcesReady, set by Run
	synced   bool
	handlers []cache.ResourceEventHandler
	known    map[types.UID]*podEntry
	byName   map[types.NamespacedName]types.UID
}

// podEntry is what the volume manager was last told about a pod.
type podEntry struct {
	pod                  *v1.Pod
	terminating, removed bool
	// gone: the pod manager no longer has it; it is kept until its runtime is removed.
	gone bool
}

var (
	_ volumemanager.PodSource    = (*podSource)(nil)
	_ volumemanager.PodLifecycle = (*podSource)(nil)
)

func newPodSource(pods kvm.PodManager, state kvm.PodStateProvider) *podSource {
	return &podSource{pods: pods, state: state, known: map[types.UID]*podEntry{}, byName: map[types.NamespacedName]types.UID{}}
}

func (s *podSource) setReady(ready func() bool) {
	s.mu.Lock()
	s.ready = ready
	s.mu.Unlock()
}

func (s *podSource) AddEventHandler(h cache.ResourceEventHandler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append(s.handlers, h)
	return nil
}

func (s *podSource) Start(ctx context.Context) {
	go func() {
		t := time.NewTicker(podPollPeriod)
		defer t.Stop()
		for {
			s.poll()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// HasSynced: every source of the kubelet's pods (API server, static files) has been seen,
// and what they gave was delivered.
func (s *podSource) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

func (s *podSource) GetPod(namespace, name string) (*v1.Pod, error) {
	s.mu.Lock()
	uid, ok := s.byName[types.NamespacedName{Namespace: namespace, Name: name}]
	s.mu.Unlock()
	if ok {
		if pod, ok := s.pods.GetPodByUID(uid); ok && pod.Namespace == namespace && pod.Name == name {
			return pod, nil
		}
	}
	// Not seen by the last poll: a new pod, or one that replaced another of that name.
	for _, pod := range s.pods.GetPods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, nil
		}
	}
	return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
}

func (s *podSource) ListPods() ([]*v1.Pod, error) { return s.pods.GetPods(), nil }

func (s *podSource) ContainersTerminating(uid types.UID) bool {
	return s.state.ShouldPodContainersBeTerminating(uid)
}

func (s *podSource) RuntimeRemoved(uid types.UID) bool { return s.state.ShouldPodRuntimeBeRemoved(uid) }

type podEvent struct {
	kind     int // 0 add, 1 update, 2 delete
	old, pod *v1.Pod
}

// poll lists the pod manager and sends an event for each pod that is new, changed (a new
// object, or a new answer of the pod state provider) or gone.
func (s *podSource) poll() {
	s.mu.Lock()
	ready := s.ready != nil && s.ready()
	var events []podEvent
	seen := map[types.UID]bool{}
	byName := map[types.NamespacedName]types.UID{}
	for _, pod := range s.pods.GetPods() {
		uid := pod.UID
		seen[uid] = true
		byName[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = uid
		e := &podEntry{pod: pod, terminating: s.state.ShouldPodContainersBeTerminating(uid), removed: s.state.ShouldPodRuntimeBeRemoved(uid)}
		old := s.known[uid]
		s.known[uid] = e
		switch {
		case old == nil:
			events = append(events, podEvent{kind: 0, pod: pod})
		case old.pod != pod || old.terminating != e.terminating || old.removed != e.removed || old.gone:
			events = append(events, podEvent{kind: 1, old: old.pod, pod: pod})
		}
	}
	// Until every source is seen, a pod missing from the pod manager may just not be read
	// yet: nothing is deleted (upstream's populator waits for sourcesReady likewise).
	if ready {
		for uid, e := range s.known {
			if seen[uid] {
				continue
			}
			removed := s.state.ShouldPodRuntimeBeRemoved(uid)
			if !e.gone || removed != e.removed {
				events = append(events, podEvent{kind: 2, pod: e.pod})
			}
			e.gone, e.removed = true, removed
			if removed {
				delete(s.known, uid)
			}
		}
	}
	s.byName = byName
	handlers := s.handlers
	s.mu.Unlock()

	for _, ev := range events {
		for _, h := range handlers {
			switch ev.kind {
			case 0:
				h.OnAdd(ev.pod, false)
			case 1:
				h.OnUpdate(ev.old, ev.pod)
			case 2:
				h.OnDelete(ev.pod)
			}
		}
	}
	if ready {
		s.mu.Lock()
		s.synced = true
		s.mu.Unlock()
	}
}
