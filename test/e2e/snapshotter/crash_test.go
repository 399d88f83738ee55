package snapshotter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// The snapshotter (both roles) is killed with SIGKILL again and again while snapshots are
// being created, with CreateSnapshot slowed down (so kills land between the call and the
// content's status write) and some replies lost after the snapshot was made; some
// snapshots are deleted while it is down. Afterwards every backend snapshot belongs to a
// content, every remaining snapshot is ready, and deleting them all leaves no backend
// snapshot: the leak count is zero.
func TestCrashLoop(t *testing.T) {
	const count, kills = 40, 15
	e := newEnv(t, envOptions{driverArgs: []string{"--fault", "CreateSnapshot:delay=150ms;CreateSnapshot:lose,error=UNAVAILABLE,rate=0.2"}})
	e.claim("src", "16Mi", nil)
	e.waitBound("src")

	for i := range count {
		e.snapshotOf(fmt.Sprintf("s%d", i), "src", nil)
	}
	deleted := map[string]bool{}
	next := 0
	for k := range kills {
		time.Sleep(time.Duration(100+rand.IntN(500)) * time.Millisecond)
		e.snapshotter.Kill()
		if k%3 == 2 { // deleted while the snapshotter is down
			for range 2 {
				name := fmt.Sprintf("s%d", next)
				next += 3
				if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				deleted[name] = true
			}
		}
		e.snapshotter.Start()
	}
	for i := range count {
		name := fmt.Sprintf("s%d", i)
		if deleted[name] {
			e.waitSnapshotGone(name)
		} else {
			e.waitReady(name)
		}
	}
	// Every backend snapshot is named by a content of this driver, and the other way round.
	handles := map[string]bool{}
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		all, err := e.snap.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		clear(handles)
		for _, c := range all.Items {
			if c.Spec.Driver == e.driver && c.Status != nil && ptr.Deref(c.Status.SnapshotHandle, "") != "" {
				handles[*c.Status.SnapshotHandle] = true
			}
		}
		return len(handles) == count-len(deleted), nil
	})
	if err != nil {
		t.Fatalf("%d contents with a snapshot handle, want %d", len(handles), count-len(deleted))
	}
	backend := e.backendSnapshots()
	leaked := 0
	for id := range backend {
		if !handles[id] {
			leaked++
			t.Errorf("leaked backend snapshot %s: no content names it", id)
		}
	}
	for h := range handles {
		if backend[h] == nil {
			t.Errorf("content names snapshot %s, which the backend does not have", h)
		}
	}
	t.Logf("crash loop: %d snapshots, %d SIGKILLs, %d snapshots deleted while the snapshotter was down; %d backend snapshots for %d contents, %d leaked",
		count, kills, len(deleted), len(backend), len(handles), leaked)

	e.deleteAllSnapshots()
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(e.backendSnapshots()) == 0, nil
	})
	if err != nil {
		t.Errorf("after deleting every snapshot (Delete policy), %d backend snapshots remain", len(e.backendSnapshots()))
	}
}
