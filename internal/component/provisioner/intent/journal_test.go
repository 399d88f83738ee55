package intent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testNS     = "kubevol"
	testDriver = "local.kubevol.io"
)

func claim(i int) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("c-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
}

// start loads and runs a journal until the test ends or stop is called (a kill: nothing
// is flushed on the way out).
func start(t *testing.T, cs *fake.Clientset, node string) (j *Journal, recs []Record, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	j = New(cs, testNS, testDriver, node)
	recs, err := j.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return j, recs, stop
}

// stored reads the records of every shard of the central journal from the API.
func stored(t *testing.T, cs *fake.Clientset, node string) map[types.UID]Record {
	t.Helper()
	list, err := cs.CoordinationV1().Leases(testNS).List(context.Background(), metav1.ListOptions{LabelSelector: Selector(testDriver, node)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]Record{}
	for _, l := range list.Items {
		recs, err := decode(l.Annotations[AnnotationRecords])
		if err != nil {
			t.Fatal(err)
		}
		for uid, r := range recs {
			out[uid] = r
		}
	}
	return out
}

// slowWrites makes every Lease write take d, as a real round trip does, and counts them.
func slowWrites(cs *fake.Clientset, d time.Duration) *atomic.Int32 {
	var n atomic.Int32
	for _, verb := range []string{"create", "update"} {
		cs.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			n.Add(1)
			time.Sleep(d) // the fake's deliberate slowness, not a wait for a result
			return false, nil, nil
		})
	}
	return &n
}

// Many CreateVolume calls that start together share a few writes, and each Add returns only
// once its own record is stored.
func TestGroupCommit(t *testing.T) {
	cs := fake.NewClientset()
	writes := slowWrites(cs, 5*time.Millisecond)
	j, _, _ := start(t, cs, "")
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := claim(i)
			if err := j.Add(context.Background(), c, Record{PVName: "pvc-" + string(c.UID), Request: []byte("req")}); err != nil {
				errs <- err
				return
			}
			if _, ok := stored(t, cs, "")[c.UID]; !ok {
				errs <- fmt.Errorf("Add of %s returned before its record was stored", c.Name)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w := writes.Load(); w > n/10 {
		t.Errorf("%d writes for %d records: not group-committed", w, n)
	}
	t.Logf("%d records in %d writes", n, writes.Load())

	// Drops are lazy and batched too.
	before := writes.Load()
	for i := range n {
		j.Remove(claim(i).UID)
	}
	waitFor(t, "the records dropped from the Leases", func() bool { return len(stored(t, cs, "")) == 0 })
	if w := writes.Load() - before; w > 3 {
		t.Errorf("%d writes to drop %d records, want them batched", w, n)
	}
}

// A killed provisioner leaves its journal: the next run loads each record it waited for,
// with the volume ID once learned, and a dropped record at most until the next write.
func TestRecordsSurviveAKill(t *testing.T) {
	cs := fake.NewClientset()
	j, _, kill := start(t, cs, "")
	ctx := context.Background()
	for i := range 3 {
		c := claim(i)
		if err := j.Add(ctx, c, Record{PVName: "pvc-" + string(c.UID), Request: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	j.SetVolumeID("uid-1", "vol-1")
	waitFor(t, "the volume ID written", func() bool { return stored(t, cs, "")["uid-1"].VolumeID == "vol-1" })
	j.Remove("uid-2")
	kill()

	j2, recs, _ := start(t, cs, "")
	byUID := map[types.UID]Record{}
	for _, r := range recs {
		byUID[r.ClaimUID] = r
	}
	if r := byUID["uid-0"]; r.PVName != "pvc-uid-0" || r.Namespace != "ns" || r.Claim != "c-0" || string(r.Request) != "\x00" {
		t.Errorf("record of c-0 after the kill: %+v", r)
	}
	if r := byUID["uid-1"]; r.VolumeID != "vol-1" {
		t.Errorf("record of c-1 after the kill: %+v, want its volume ID", r)
	}
	if len(recs) < 2 || len(recs) > 3 {
		t.Errorf("%d records after the kill, want c-0, c-1 and maybe the dropped c-2", len(recs))
	}
	// The new leader writes over the old one's journal without losing a record.
	if err := j2.Add(ctx, claim(9), Record{PVName: "pvc-uid-9"}); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, cs, ""); got["uid-0"].PVName == "" || got["uid-9"].PVName == "" {
		t.Errorf("stored after the new leader's write: %v", got)
	}
}

// Each --node-deployment instance loads and writes only its own node's journal, and no
// other driver's.
func TestJournalsAreTheirNodes(t *testing.T) {
	cs := fake.NewClientset()
	a, _, stopA := start(t, cs, "node-a")
	if err := a.Add(context.Background(), claim(1), Record{PVName: "pvc-uid-1"}); err != nil {
		t.Fatal(err)
	}
	stopA()
	for _, c := range []struct {
		name, driver, node string
		want               int
	}{
		{"the writing node", testDriver, "node-a", 1},
		{"another node", testDriver, "node-b", 0},
		{"a central provisioner", testDriver, "", 0},
		{"another driver", "other.example.com", "node-a", 0},
	} {
		recs, err := New(cs, testNS, c.driver, c.node).Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != c.want {
			t.Errorf("%s: Load found %d records, want %d", c.name, len(recs), c.want)
		}
	}
}

// Records that do not fit one object's annotations spread over several Leases.
func TestShards(t *testing.T) {
	cs := fake.NewClientset()
	j, _, kill := start(t, cs, "")
	req := []byte(strings.Repeat("r", 20<<10))
	const n = 30 // 600 KiB of requests
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.Add(context.Background(), claim(i), Record{PVName: "pv", Request: req}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	list, err := cs.CoordinationV1().Leases(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 3 {
		t.Errorf("%d Leases for %d KiB of records, want shards", len(list.Items), n*20)
	}
	for _, l := range list.Items {
		var total int
		for k, v := range l.Annotations {
			total += len(k) + len(v)
		}
		if total > 256<<10 {
			t.Errorf("Lease %s: %d bytes of annotations, over the API server's limit", l.Name, total)
		}
	}
	kill()
	if _, recs, _ := start(t, cs, ""); len(recs) != n {
		t.Errorf("%d records loaded from the shards, want %d", len(recs), n)
	}
	// A request too large for a shard is not kept; the record is.
	j2 := New(cs, testNS, testDriver, "x")
	if _, err := j2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	go j2.Run(t.Context())
	if err := j2.Add(t.Context(), claim(1), Record{PVName: "pv", Request: make([]byte, maxRequestBytes+1)}); err != nil {
		t.Fatal(err)
	}
	if r, _ := j2.Get("uid-1"); r.Request != nil || r.PVName != "pv" {
		t.Errorf("oversized request kept: %d bytes", len(r.Request))
	}
}

// Where the role grants nothing on Leases, the journal degrades to memory: each claim is
// told once, and provisioning goes on.
func TestNoRightsOnLeases(t *testing.T) {
	for _, verb := range []string{"list", "create"} {
		t.Run(verb, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New("RBAC"))
			})
			j, _, _ := start(t, cs, "")
			ctx := context.Background()
			if err := j.Add(ctx, claim(1), Record{PVName: "pv-1"}); !errors.Is(err, ErrUnrecorded) {
				t.Fatalf("first Add: %v, want ErrUnrecorded", err)
			}
			if err := j.Add(ctx, claim(1), Record{PVName: "pv-1"}); err != nil {
				t.Fatalf("second Add of the claim: %v, want nil (told once)", err)
			}
			if err := j.Add(ctx, claim(2), Record{PVName: "pv-2"}); !errors.Is(err, ErrUnrecorded) {
				t.Fatalf("another claim: %v, want ErrUnrecorded", err)
			}
			if _, ok := j.Get("uid-1"); !ok || j.Len() != 2 {
				t.Error("the records are not kept in memory")
			}
		})
	}
}

// versioned makes the fake check and bump the Leases' resourceVersion, as the API server
// does (the fake stores whatever it is given).
func versioned(cs *fake.Clientset) {
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).ResourceVersion = "1"
		return false, nil, nil
	})
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		cur, err := cs.Tracker().Get(gvr, l.Namespace, l.Name)
		if err != nil {
			return false, nil, nil
		}
		rv := cur.(*coordinationv1.Lease).ResourceVersion
		if l.ResourceVersion != "" && l.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("stale resourceVersion"))
		}
		n, _ := strconv.Atoi(rv)
		l.ResourceVersion = strconv.Itoa(n + 1)
		return false, nil, nil
	})
}

// A record that a previous leader wrote after this leader loaded the journal is adopted at
// the next conflicting write, never overwritten.
func TestConflictAdoptsForeignRecords(t *testing.T) {
	cs := fake.NewClientset()
	versioned(cs)
	old, _, _ := start(t, cs, "")
	if err := old.Add(context.Background(), claim(1), Record{PVName: "pvc-uid-1"}); err != nil {
		t.Fatal(err)
	}
	j := New(cs, testNS, testDriver, "")
	if _, err := j.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	adopted := make(chan Record, 1)
	j.OnAdopt(func(r Record) { adopted <- r })
	// The old leader's last write lands after the new leader's Load.
	if err := old.Add(context.Background(), claim(2), Record{PVName: "pvc-uid-2"}); err != nil {
		t.Fatal(err)
	}
	go j.Run(t.Context())
	j.Remove("uid-1")
	if err := j.Add(context.Background(), claim(3), Record{PVName: "pvc-uid-3"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-adopted:
		if r.ClaimUID != "uid-2" {
			t.Errorf("adopted %+v, want the record of uid-2", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the record written by the old leader was not adopted")
	}
	got := stored(t, cs, "")
	if _, ok := got["uid-2"]; !ok {
		t.Errorf("the old leader's record was overwritten: %v", got)
	}
	if _, ok := got["uid-1"]; ok {
		t.Errorf("the record this leader dropped was brought back: %v", got)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}
