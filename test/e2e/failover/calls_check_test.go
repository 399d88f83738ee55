package failover

import (
	"strings"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// The call-log checks catch what they are for, on a made-up log of two attacher replicas:
// replica 0 leads, is killed at 10 s with a publish hung in the driver, and replica 1 takes
// over at 25 s.
func TestCallChecksCatchOverlapsAndStandbys(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := &role{name: "attacher", lease: "external-attacher-leader-x"}
	r0 := &replica{role: r, slot: 0, socket: "/s/attacher-0.sock", ends: []time.Time{at(10)}}
	r1 := &replica{role: r, slot: 1, socket: "/s/attacher-1.sock"}
	r.replicas = []*replica{r0, r1}
	taken := &leadership{role: r.name, slot: 1, inc: 0, acquired: at(25), takeoverOf: &kill{role: r.name, slot: 0, at: at(10)}}
	s := &replicaSet{roles: []*role{r}, history: []*leadership{{role: r.name, slot: 0, inc: 0, acquired: at(0)}, taken}}
	rec := func(rep *replica, method, volume string, start, end float64) driver.CallRecord {
		return driver.CallRecord{Method: method, VolumeID: volume, Endpoint: rep.socket, Start: at(start), End: at(end)}
	}
	a := s.analyse([]driver.CallRecord{
		rec(r1, "Probe", "", 1, 1.1),                                   // a standby may probe
		rec(r0, "DeleteVolume", "v3", 1, 3),                            // both alive, both in flight:
		rec(r1, "DeleteVolume", "v3", 2, 4),                            // an overlap, by a standby
		rec(r1, "ControllerPublishVolume", "v2", 5, 6),                 // a standby's call
		rec(r0, "ControllerPublishVolume", "v1", 9, 30),                // hung when its caller died
		rec(r1, "ControllerPublishVolume", "v1", 26, 27),               // the successor's retry
		{Method: "ListVolumes", Endpoint: "/s/csi.sock", Start: at(2)}, // the test's own
	})
	if a.hung != 1 {
		t.Errorf("%d overlaps of a killed leader's call, want 1", a.hung)
	}
	var standby, overlap int
	for _, e := range a.errors {
		switch {
		case strings.Contains(e, "without holding the Lease"):
			standby++
		case strings.Contains(e, "both callers alive"):
			overlap++
		default:
			t.Errorf("unexpected finding %q", e)
		}
	}
	if standby != 2 || overlap != 1 {
		t.Errorf("%d calls without the Lease (want 2) and %d overlaps of live callers (want 1):\n%s", standby, overlap, strings.Join(a.errors, "\n"))
	}
	if got := a.firstCall[taken]; !got.Equal(at(26)) {
		t.Errorf("the new leader's first call at %s, want %s", got, at(26))
	}
	if a.mutatingCalls != 5 {
		t.Errorf("%d mutating calls, want 5", a.mutatingCalls)
	}
}
