package snapshotter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// replica is one csi-snapshotter process of a leader-elected pair and its metrics address.
type replica struct {
	*framework.Process
	http string
}

// Two csi-snapshotter replicas (one ServiceAccount, as a Deployment's pods) share the
// driver's Lease beside a leader-elected snapshot-controller; the leader is killed with
// SIGKILL in the middle of a storm of VolumeSnapshots, with CreateSnapshot slowed so that
// calls are in flight. The other replica takes the Lease and finishes: every snapshot is
// ready with exactly one backend snapshot, the Lease names the survivor, and deleting the
// snapshots leaves the driver none.
//
// Without leader election both replicas would act on every content at once. The driver
// dedupes CreateSnapshot by name, so that might leave no duplicate; the assertion that
// catches it is on the standby's own csi_sidecar_operations_seconds: while the leader holds
// the Lease the standby must not have called CreateSnapshot or DeleteSnapshot at all. The
// one-to-one match of contents and backend snapshots catches a replica that made a snapshot
// under another name or lost one.
func TestLeaderKilledMidStorm(t *testing.T) {
	const count = 40
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	e := newEnv(t, envOptions{noSnapshotter: true, driverArgs: []string{"--fault", "CreateSnapshot:delay=300ms", "--call-log", callLog}})
	le := []string{"--leader-election", "--leader-election-namespace", e.ns, "--leader-election-lease-duration", "4s",
		"--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "1s",
		"--retry-interval-start", "100ms", "--retry-interval-max", "2s", "-v", "3"}
	framework.StartKubevol(t, append([]string{"snapshot-controller",
		"--kubeconfig", framework.RunAs(e.ctx, t, e.ns, "snapshot-controller", framework.SnapshotController)}, le...)...)
	kc := framework.RunAs(e.ctx, t, e.ns, "csi-snapshotter", framework.CSISnapshotter)
	var replicas [2]replica
	for i := range replicas {
		addr := framework.FreeAddr(t)
		// Two workers: the storm lasts long enough for the kill to land in it.
		replicas[i] = replica{framework.StartKubevol(t, append([]string{"csi-snapshotter", "--csi-address", e.socket, "--kubeconfig", kc,
			"--http-endpoint", addr, "--worker-threads", "2"}, le...)...), addr}
	}
	// Runs before the replicas stop: a failed test's snapshots still get deleted.
	t.Cleanup(e.deleteAllSnapshots)
	lease := snapshotter.SidecarLease(e.driver)
	holder := e.waitLeaseHolder(lease, "")
	leader := e.leaderOf(replicas[:], holder)
	standby := replicas[1-leader]

	e.claim("src", "16Mi", nil)
	srcHandle := e.pvOf(e.waitBound("src")).Spec.CSI.VolumeHandle
	for i := range count {
		e.snapshotOf(fmt.Sprintf("s%d", i), "src", nil)
	}
	readyAtKill := e.waitReadyCount(count / 4)
	// Read before the kill: this is what the standby did while the leader held the Lease.
	standbyCalls := standby.snapshotCalls(t)
	leaderCalls := replicas[leader].snapshotCalls(t)
	replicas[leader].Kill()
	if standbyCalls != 0 {
		t.Errorf("the standby made %d CreateSnapshot/DeleteSnapshot calls while replica %d led: both replicas acted", standbyCalls, leader)
	}
	if leaderCalls == 0 {
		t.Errorf("the leader's metrics count no CreateSnapshot, with %d snapshots ready", readyAtKill)
	}

	for i := range count {
		e.waitReady(fmt.Sprintf("s%d", i))
	}
	newHolder := e.waitLeaseHolder(lease, holder)
	if survivor := e.leaderOf(replicas[:], newHolder); survivor != 1-leader {
		t.Errorf("the Lease is held by replica %d (%s), want the survivor %d", survivor, newHolder, 1-leader)
	}
	if standby.Exited() {
		t.Error("the survivor exited")
	}

	// One backend snapshot per VolumeSnapshot: distinct handles, and nothing else on the backend.
	handles := map[string]string{}
	for i := range count {
		name := fmt.Sprintf("s%d", i)
		vs, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := e.content(ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, ""))
		h := ptr.Deref(c.Status.SnapshotHandle, "")
		if other, dup := handles[h]; dup {
			t.Errorf("%s and %s share backend snapshot %s", name, other, h)
		}
		handles[h] = name
	}
	backend := e.backendSnapshots()
	for id, s := range backend {
		if handles[id] == "" {
			t.Errorf("backend snapshot %s (of volume %s) belongs to no VolumeSnapshot", id, s.GetSourceVolumeId())
		} else if s.GetSourceVolumeId() != srcHandle {
			t.Errorf("backend snapshot %s of %s is of volume %s, want %s", id, handles[id], s.GetSourceVolumeId(), srcHandle)
		}
	}
	for h, name := range handles {
		if backend[h] == nil {
			t.Errorf("%s names backend snapshot %s, which the driver does not have", name, h)
		}
	}
	t.Logf("%d snapshots, %d ready when leader %d (%d calls) was killed; %d CreateSnapshot calls cut off by the kill; %d backend snapshots",
		count, readyAtKill, leader, leaderCalls, cutOff(t, callLog), len(backend))

	// Deleting every snapshot (Delete policy) leaves no content of the driver and no
	// backend snapshot.
	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	var snaps, contents, left int
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		vs, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		all, err := e.snap.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		snaps, contents = len(vs.Items), 0
		for _, c := range all.Items {
			if c.Spec.Driver == e.driver {
				contents++
			}
		}
		left = len(e.backendSnapshots())
		return snaps+contents+left == 0, nil
	})
	if err != nil {
		t.Errorf("after deleting every snapshot: %d VolumeSnapshots, %d contents and %d backend snapshots remain", snaps, contents, left)
	}
}

// cutOff counts the driver's CreateSnapshot calls that ended because their client went away.
func cutOff(t *testing.T, path string) int {
	t.Helper()
	recs, err := driver.ReadCallLog(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Method == "CreateSnapshot" && r.Code == "Canceled" {
			n++
		}
	}
	return n
}

// waitLeaseHolder waits until the Lease has a holder other than not ("" for any) and returns it.
func (e *env) waitLeaseHolder(lease, not string) string {
	e.t.Helper()
	holder, err := framework.WaitLeaseHolder(e.ctx, e.cs, e.ns, lease, not)
	if err != nil {
		e.t.Fatalf("Lease %s/%s: no holder other than %q: %v", e.ns, lease, not, err)
	}
	return holder
}

// leaderOf waits until a replica has logged taking the Lease as holder (its callback logs
// just after the Lease write) and returns its index.
func (e *env) leaderOf(replicas []replica, holder string) int {
	e.t.Helper()
	found := -1
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for i, r := range replicas {
			data, err := os.ReadFile(r.LogPath)
			if err != nil {
				return false, err
			}
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, "Became the leader") && strings.Contains(line, `"`+holder+`"`) {
					found = i
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no replica logged becoming the leader %s: %v", holder, err)
	}
	return found
}

// waitReadyCount waits until at least n of the namespace's VolumeSnapshots are ready and
// returns how many are.
func (e *env) waitReadyCount(n int) int {
	e.t.Helper()
	ready := 0
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready = 0
		for _, vs := range l.Items {
			if vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false) {
				ready++
			}
		}
		return ready >= n, nil
	})
	if err != nil {
		e.t.Fatalf("%d snapshots ready, want %d: %v", ready, n, err)
	}
	return ready
}

// snapshotCalls is the replica's count of CreateSnapshot and DeleteSnapshot calls, from its
// csi_sidecar_operations_seconds.
func (r replica) snapshotCalls(t *testing.T) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(scrape(t, r.http), "\n") {
		if !strings.HasPrefix(line, "csi_sidecar_operations_seconds_count{") ||
			!strings.Contains(line, "/CreateSnapshot\"") && !strings.Contains(line, "/DeleteSnapshot\"") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
