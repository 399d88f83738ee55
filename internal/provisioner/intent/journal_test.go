package intent

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestJournalGroupCommitAndReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := fake.NewClientset()
	var updates int
	var mu sync.Mutex
	cs.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		updates++
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // a slow API server makes the batching visible
		return false, nil, nil
	})
	j := New(cs, "kube-system", "intents")
	if recs, err := j.Load(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("Load: %v %v", recs, err)
	}
	go j.Run(ctx)

	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := types.UID(string(rune('a'+i%26)) + string(rune('a'+i/26)))
			if err := j.Add(ctx, Record{ClaimUID: uid, PVName: "pvc-" + string(uid), Request: []byte{1, 2}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	if updates >= n {
		t.Errorf("%d adds took %d writes; want them batched", n, updates)
	}
	mu.Unlock()
	j.SetVolumeID("aa", "vol-1")
	j.Remove("ba")
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	j2 := New(cs, "kube-system", "intents")
	recs, err := j2.Load(ctx)
	if err != nil || len(recs) != n-1 {
		t.Fatalf("reload: %d records, %v", len(recs), err)
	}
	if r, _ := j2.Get("aa"); r.VolumeID != "vol-1" || string(r.Request) != "\x01\x02" {
		t.Fatalf("record aa = %+v", r)
	}
	if _, ok := j2.Get("ba"); ok {
		t.Fatal("removed record came back")
	}
}

func TestJournalSurvivesForeignWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := fake.NewClientset()
	j := New(cs, "ns", "intents")
	if _, err := j.Load(ctx); err != nil {
		t.Fatal(err)
	}
	go j.Run(ctx)
	// Another writer bumps the resourceVersion (the fake checks it).
	cm, _ := cs.CoreV1().ConfigMaps("ns").Get(ctx, "intents", metav1.GetOptions{})
	cm.ResourceVersion = "999"
	if _, err := cs.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := j.Add(ctx, Record{ClaimUID: "x", PVName: "pvc-x"}); err != nil {
		t.Fatal(err)
	}
	recs, err := New(cs, "ns", "intents").Load(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%v %v", recs, err)
	}
}
