package csidrivers

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// callLog is the order of the refresh loop's calls: its CSIDriver reads ("get <driver>")
// and the NodeGetInfo calls the drivers answer ("info <driver>"). The loop makes them one
// after the other, so the log says in which tick each refresh happened.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) { l.mu.Lock(); l.calls = append(l.calls, s); l.mu.Unlock() }

func (l *callLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if c == s {
			n++
		}
	}
	return n
}

// of is the driver's calls, "g" for a read of its CSIDriver and "i" for NodeGetInfo.
func (l *callLog) of(driver string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		switch c {
		case "get " + driver:
			out = append(out, "g")
		case "info " + driver:
			out = append(out, "i")
		}
	}
	return strings.Join(out, " ")
}

// limitNode is a CSI node service whose max_volumes_per_node can change.
type limitNode struct {
	infoNode
	log *callLog
	mu  sync.Mutex
	max int64
}

func (n *limitNode) setMax(v int64) { n.mu.Lock(); n.max = v; n.mu.Unlock() }

func (n *limitNode) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	n.log.add("info " + n.id)
	n.mu.Lock()
	defer n.mu.Unlock()
	return &csi.NodeGetInfoResponse{NodeId: n.id, MaxVolumesPerNode: n.max}, nil
}

type loggingLister struct {
	storagelisters.CSIDriverLister
	log *callLog
}

func (l loggingLister) Get(name string) (*storagev1.CSIDriver, error) {
	l.log.add("get " + name)
	return l.CSIDriverLister.Get(name)
}

// Each driver whose CSIDriver sets nodeAllocatableUpdatePeriodSeconds is asked NodeGetInfo
// again once per period, and a changed max_volumes_per_node reaches the CSINode; a driver
// without the field is never asked again.
func TestRunAllocatableUpdates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}})
	r := New(cs, "n1")
	defer r.Close()
	fc := clocktesting.NewFakeClock(time.Now())
	r.clock = fc
	log := &callLog{}
	periodic := &limitNode{infoNode: infoNode{id: "periodic"}, log: log, max: 8}
	static := &limitNode{infoNode: infoNode{id: "static"}, log: log, max: 8}
	for _, n := range []*limitNode{periodic, static} {
		if err := r.RegisterPlugin(ctx, n.id, serveNode(t, n), []string{"1.0.0"}); err != nil {
			t.Fatal(err)
		}
	}
	period := int64(2)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = indexer.Add(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "periodic"},
		Spec: storagev1.CSIDriverSpec{NodeAllocatableUpdatePeriodSeconds: &period}})
	_ = indexer.Add(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "static"}})
	log.mu.Lock()
	log.calls = nil // the registrations' calls
	log.mu.Unlock()
	periodic.setMax(12)
	static.setMax(12)

	done := make(chan struct{})
	go func() {
		defer close(done)
		r.RunAllocatableUpdates(ctx, loggingLister{storagelisters.NewCSIDriverLister(indexer), log})
	}()
	// One tick at a time: the loop reads the CSIDriver of tick k only after it took tick k
	// from the ticker, so the next step is never lost.
	for tick := 1; tick <= 8; tick++ {
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return fc.HasWaiters(), nil }); err != nil {
			t.Fatalf("tick %d: the loop never waited on the clock", tick)
		}
		fc.Step(time.Second)
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return log.count("get periodic") >= tick && log.count("get static") >= tick, nil
		}); err != nil {
			t.Fatalf("tick %d not processed: %q", tick, log.of("periodic"))
		}
	}
	cancel()
	<-done

	// The first tick starts the period (registration read the driver), then a refresh
	// every 2 ticks of one second (ticks 3, 5 and 7); tick 8's read shows tick 7 is complete.
	if got, want := log.of("periodic"), "g g g i g g i g g i g"; got != want {
		t.Errorf("periodic driver's calls %q, want %q", got, want)
	}
	if got := log.of("static"); strings.Contains(got, "i") {
		t.Errorf("driver without a period refreshed: %q", got)
	}
	cn, err := cs.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int32{}
	for _, d := range cn.Spec.Drivers {
		counts[d.Name] = *d.Allocatable.Count
	}
	if counts["periodic"] != 12 || counts["static"] != 8 {
		t.Errorf("CSINode allocatable counts %v, want periodic 12 (refreshed), static 8", counts)
	}
}
