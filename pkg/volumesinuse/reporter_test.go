package volumesinuse

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeSource is a volume manager's view of its volumes.
type fakeSource struct {
	initialized chan struct{}

	mu       sync.Mutex
	inUse    []v1.UniqueVolumeName
	reported []v1.UniqueVolumeName
	marks    int
	// waited is set once the reporter asked for Initialized, reads counts VolumesInUse.
	waited bool
	reads  int
}

func (s *fakeSource) Initialized() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waited = true
	return s.initialized
}

func (s *fakeSource) VolumesInUse() []v1.UniqueVolumeName {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return slices.Clone(s.inUse)
}

// waiting reports whether the reporter waits for initialization without having read the
// volumes in use.
func (s *fakeSource) waiting() (waited bool, reads int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waited, s.reads
}

func (s *fakeSource) MarkVolumesReportedInUse(names []v1.UniqueVolumeName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reported = slices.Clone(names)
	s.marks++
}

func (s *fakeSource) set(names ...v1.UniqueVolumeName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse = names
}

func (s *fakeSource) state() (reported []v1.UniqueVolumeName, marks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reported), s.marks
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return f(), nil }); err != nil {
		t.Fatalf("timed out: %s", what)
	}
}

// The list is written only once the manager is initialized (a restarted node keeps the
// volumes it still has mounted listed), then at once on every change; the manager is told
// what the API server returned, and a failed write is retried.
func TestReporter(t *testing.T) {
	const a, b = v1.UniqueVolumeName("kubernetes.io/csi/d^a"), v1.UniqueVolumeName("kubernetes.io/csi/d^b")
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{VolumesInUse: []v1.UniqueVolumeName{a}}})
	var failures atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Load() > 0 {
			failures.Add(-1)
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	r, err := New(Config{Client: client, NodeName: "n1", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{initialized: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, src); close(done) }()
	defer func() { cancel(); <-done }()

	nodeInUse := func() []v1.UniqueVolumeName {
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Status.VolumesInUse
	}
	eventually(t, "the reporter waiting for initialization", func() bool { w, _ := src.waiting(); return w })
	r.Notify()
	if _, reads := src.waiting(); reads != 0 {
		t.Fatalf("the source was read %d times before initialization", reads)
	}
	if got := nodeInUse(); !slices.Equal(got, []v1.UniqueVolumeName{a}) {
		t.Fatalf("before initialization volumesInUse = %v, want it untouched", got)
	}

	src.set(a, b)
	close(src.initialized)
	eventually(t, "first report", func() bool {
		reported, _ := src.state()
		return slices.Equal(reported, []v1.UniqueVolumeName{a, b})
	})
	if got := nodeInUse(); !slices.Equal(got, []v1.UniqueVolumeName{a, b}) {
		t.Errorf("volumesInUse = %v", got)
	}

	// A change is written at once (the interval is an hour), after a failed attempt.
	failures.Store(2)
	src.set(b)
	r.Notify()
	eventually(t, "report after failures", func() bool {
		reported, _ := src.state()
		return slices.Equal(reported, []v1.UniqueVolumeName{b})
	})
	if failures.Load() != 0 {
		t.Errorf("%d failures left: the write was not retried", failures.Load())
	}

	src.set()
	r.Notify()
	eventually(t, "empty list", func() bool { return len(nodeInUse()) == 0 })
	eventually(t, "empty list marked", func() bool { reported, _ := src.state(); return len(reported) == 0 })
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{NodeName: "n1"}); err == nil {
		t.Error("no client accepted")
	}
	if _, err := New(Config{Client: fake.NewClientset()}); err == nil {
		t.Error("no node name accepted")
	}
}
