package failover

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// Every controller role runs as two replicas under its shipped RBAC and upstream's Lease
// name and timing (15 s lease, 10 s renew deadline, 5 s retry period), against one driver
// that serves each replica on a socket of its own. Loops keep every role busy: claims
// provisioned and deleted, volumes attached and detached, claims expanded and moved between
// VolumeAttributesClasses, snapshots and group snapshots taken and deleted. Meanwhile the
// leader of every role is killed with SIGKILL, round after round, and started again as a
// standby, as its kubelet would.
//
// The driver's call log, which names the socket of each call, shows:
//   - no replica made a mutating call without holding its Lease;
//   - no two replicas had a mutating call on one object in flight at once, except a killed
//     leader's call that the driver was still running when its successor retried it (the
//     killed replica was dead before the second call started; nothing can cancel a call
//     whose caller died, and the driver's idempotence makes the retry safe).
//
// At the end nothing is left: no claim, PV, attachment, snapshot, content or group, no
// finalizer, and the driver has no volume and no snapshot. The takeover times are printed:
// from the kill to the standby holding the Lease, and to its first CSI call.
func TestLeaderKilledAgainAndAgain(t *testing.T) {
	const rounds = 4
	start := time.Now()
	e := newEnv(t, 8*time.Minute, envOptions{replicas: 2, timing: upstreamTiming})
	if err := e.set.waitLeaders(time.Time{}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	owned := []string{"a0", "a1", "r0", "r1", "s0", "s1", "g0", "g1"}
	pvs, err := e.ownedClaims(owned, map[string]map[string]string{"g0": {"group": "g"}, "g1": {"group": "g"}})
	if err != nil {
		t.Fatal(err)
	}
	setup := time.Since(start)

	w := newWorkload(e)
	for n := range 3 {
		w.loop("claim", n, e.claimLoop(n))
	}
	for n, c := range []string{"a0", "a1"} {
		w.loop("attach", n, e.attachLoop(pvs[c]))
	}
	for n, c := range []string{"r0", "r1"} {
		w.loop("expand+modify", n, e.resizeLoop(c))
	}
	for n, c := range []string{"s0", "s1"} {
		w.loop("snapshot", n, e.snapshotLoop(c))
	}
	w.loop("group", 0, e.groupLoop("g"))

	// The bound of a takeover: client-go's standby may have seen the dead leader's last
	// renewal up to one jittered retry (2.2 periods) after it, and retries up to 2.2 periods
	// after the Lease expired; the Lease duration plus one period is the usual case.
	tm := e.timing
	bound := tm.lease + 44*tm.retry/10
	for round := range rounds {
		// Some work under the leaders of the round before.
		time.Sleep(3 * time.Second)
		killed := time.Now()
		e.set.killLeaders()
		if err := e.set.waitLeaders(killed, bound+time.Minute); err != nil {
			w.end()
			t.Fatalf("round %d: %v", round, err)
		}
	}
	time.Sleep(3 * time.Second)
	w.end()
	storm := time.Since(start) - setup
	if t.Failed() {
		return
	}
	if err := e.deleteOwned(pvs); err != nil {
		t.Fatal(err)
	}
	e.checkNothingLeft()

	recs, err := driver.ReadCallLog(e.callLog)
	if err != nil {
		t.Fatal(err)
	}
	a := e.set.analyse(recs)
	for _, msg := range a.errors {
		t.Error(msg)
	}
	e.takeovers(a, bound)
	var done []string
	for _, k := range []string{"claim", "attach", "expand+modify", "snapshot", "group"} {
		done = append(done, fmt.Sprintf("%d %s", w.done[k].Load(), k))
		if w.done[k].Load() == 0 {
			t.Errorf("no %s iteration finished during the storm", k)
		}
	}
	framework.Figure(t, "failover storm: %d rounds of leader kills in %s (setup %s); iterations: %s; %d mutating CSI calls, %d overlaps of a killed leader's hung call with its successor's",
		rounds, elapsed(storm), elapsed(setup), strings.Join(done, ", "), a.mutatingCalls, a.hung)
}

// takeovers prints the takeover times of the kills and checks each against bound (from the
// kill to the Lease) and bound plus a start-up allowance (to the first CSI call).
func (e *env) takeovers(a callAnalysis, bound time.Duration) {
	e.t.Helper()
	// A new leader starts its informers and waits for their sync before its first call.
	const startup = 10 * time.Second
	var acquire, first []time.Duration
	nominal := 0
	e.set.mu.Lock()
	history := e.set.history
	e.set.mu.Unlock()
	for _, ld := range history {
		k := ld.takeoverOf
		if k == nil {
			continue
		}
		d := ld.acquired.Sub(k.at)
		acquire = append(acquire, d)
		if d <= e.timing.lease+e.timing.retry {
			nominal++
		}
		if d > bound {
			e.t.Errorf("%s took the %s Lease %s after the leader was killed, beyond %s", ld.replicaName, ld.role, elapsed(d), bound)
		}
		if ld.role == "snapshot-controller" {
			continue // it calls no driver
		}
		fc, ok := a.firstCall[ld]
		if !ok {
			e.t.Errorf("%s took the %s Lease %s after the kill but made no CSI call", ld.replicaName, ld.role, elapsed(d))
			continue
		}
		first = append(first, fc.Sub(k.at))
		if fc.Sub(k.at) > bound+startup {
			e.t.Errorf("%s made its first CSI call %s after the %s leader was killed, beyond %s", ld.replicaName, elapsed(fc.Sub(k.at)), ld.role, bound+startup)
		}
	}
	if len(acquire) == 0 {
		e.t.Fatal("no takeover seen")
	}
	p50, maxA := percentiles(acquire)
	f50, maxF := percentiles(first)
	framework.Figure(e.t, "takeover (lease %s, retry %s): kill to Lease held p50 %s max %s (%d of %d within lease+retry); kill to first CSI call p50 %s max %s (%d takeovers)",
		e.timing.lease, e.timing.retry, elapsed(p50), elapsed(maxA), nominal, len(acquire), elapsed(f50), elapsed(maxF), len(first))
}

// checkNothingLeft waits until the API holds nothing of the test and the driver no volume
// and no snapshot.
func (e *env) checkNothingLeft() {
	e.t.Helper()
	var left []string
	err := e.poll("nothing left", 2*time.Minute, func(ctx context.Context) (bool, error) {
		left = append(e.leftovers(ctx), e.backend(ctx)...)
		return len(left) == 0, nil
	})
	if err != nil {
		e.t.Errorf("left after the storm:\n%s", strings.Join(left, "\n"))
	}
}

// backend lists the driver's volumes and snapshots.
func (e *env) backend(ctx context.Context) []string {
	var out []string
	cctx, cancel := e.conn.WithTimeout(ctx)
	defer cancel()
	vols, err := e.conn.Controller.ListVolumes(cctx, &csi.ListVolumesRequest{})
	if err != nil {
		return []string{"ListVolumes: " + err.Error()}
	}
	for _, v := range vols.GetEntries() {
		out = append(out, "backend volume "+v.GetVolume().GetVolumeId())
	}
	snaps, err := e.conn.Controller.ListSnapshots(cctx, &csi.ListSnapshotsRequest{})
	if err != nil {
		return append(out, "ListSnapshots: "+err.Error())
	}
	for _, s := range snaps.GetEntries() {
		out = append(out, "backend snapshot "+s.GetSnapshot().GetSnapshotId())
	}
	return out
}
