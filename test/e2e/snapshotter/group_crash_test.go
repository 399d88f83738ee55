package snapshotter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// TestGroupCrashLoop is TestCrashLoop for group snapshots: the snapshotter is killed with
// SIGKILL again and again while groups of two claims are taken, CreateVolumeGroupSnapshot
// slowed down and a share of its replies lost after the group was made; some groups are
// deleted while it is down. Afterwards every backend group belongs to a group content and
// has one ready member snapshot per claim, and deleting every group leaves no backend
// snapshot.
func TestGroupCrashLoop(t *testing.T) {
	const count, kills = 12, 8
	e := newEnv(t, envOptions{driverArgs: []string{"--fault", "CreateVolumeGroupSnapshot:delay=150ms;CreateVolumeGroupSnapshot:lose,error=UNAVAILABLE,rate=0.3"}})
	e.groupClass(snapv1.VolumeSnapshotContentDelete)
	t.Cleanup(e.deleteAllGroups)
	for _, name := range []string{"ca", "cb"} {
		pvc := framework.ClaimSpec(name, e.sc, "16Mi")
		pvc.Labels = map[string]string{"group": "crash"}
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitBound(name)
	}
	groups := e.snap.GroupsnapshotV1()
	for i := range count {
		vgs := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("g%d", i), Namespace: e.ns},
			Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": "crash"}}}}}
		if _, err := groups.VolumeGroupSnapshots(e.ns).Create(e.ctx, vgs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := map[string]bool{}
	next := 0
	for k := range kills {
		time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		e.snapshotter.Kill()
		if k%4 == 3 {
			name := fmt.Sprintf("g%d", next)
			next += 5
			if err := groups.VolumeGroupSnapshots(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleted[name] = true
		}
		e.snapshotter.Start()
	}
	for i := range count {
		name := fmt.Sprintf("g%d", i)
		if deleted[name] {
			e.waitGone("VolumeGroupSnapshot "+name, func(ctx context.Context) error {
				_, err := groups.VolumeGroupSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
				return err
			})
			continue
		}
		vgs := e.waitGroup(name, "ready", func(g *groupv1.VolumeGroupSnapshot) bool {
			return g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false)
		})
		content, err := groups.VolumeGroupSnapshotContents().Get(e.ctx, snapshotter.GroupContentName(vgs), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range content.Status.VolumeSnapshotInfoList {
			e.waitReady(snapshotter.MemberSnapshotName(string(vgs.UID), info.VolumeHandle))
		}
	}
	// Every backend group is named by a group content of this driver, and the other way round.
	handles := map[string]bool{}
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		all, err := groups.VolumeGroupSnapshotContents().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		clear(handles)
		for _, c := range all.Items {
			if c.Spec.Driver == e.driver && c.Status != nil && ptr.Deref(c.Status.VolumeGroupSnapshotHandle, "") != "" {
				handles[*c.Status.VolumeGroupSnapshotHandle] = true
			}
		}
		return len(handles) == count-len(deleted), nil
	})
	if err != nil {
		t.Fatalf("%d group contents with a handle, want %d", len(handles), count-len(deleted))
	}
	backend := e.backendSnapshots()
	members := map[string]int{}
	leaked := 0
	for id, sn := range backend {
		g := sn.GetGroupSnapshotId()
		if !handles[g] {
			leaked++
			t.Errorf("leaked backend snapshot %s (group %q): no group content names it", id, g)
		}
		members[g]++
	}
	for h := range handles {
		if members[h] != 2 {
			t.Errorf("group %s has %d backend members, want 2", h, members[h])
		}
	}
	t.Logf("group crash loop: %d groups of 2, %d SIGKILLs, %d groups deleted while the snapshotter was down; %d backend snapshots in %d groups, %d leaked",
		count, kills, len(deleted), len(backend), len(handles), leaked)

	e.deleteAllGroups()
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(e.backendSnapshots()) == 0, nil
	})
	if err != nil {
		t.Errorf("after deleting every group (Delete policy), %d backend snapshots remain", len(e.backendSnapshots()))
	}
}
