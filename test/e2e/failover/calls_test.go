package failover

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// mutating are the CSI calls that change the backend: two callers with one of them in
// flight on the same object may both take effect.
var mutating = map[string]bool{
	"CreateVolume": true, "DeleteVolume": true, "ControllerPublishVolume": true, "ControllerUnpublishVolume": true,
	"ControllerExpandVolume": true, "ControllerModifyVolume": true, "CreateSnapshot": true, "DeleteSnapshot": true,
	"CreateVolumeGroupSnapshot": true, "DeleteVolumeGroupSnapshot": true,
}

// subject names the object a mutating call is about: the name a create is idempotent on,
// else the ID it acts on.
func subject(r driver.CallRecord) string {
	switch r.Method {
	case "CreateVolume", "CreateSnapshot", "CreateVolumeGroupSnapshot":
		return r.Method + " " + r.Name
	case "DeleteSnapshot":
		return "snapshot " + r.SnapshotID
	case "DeleteVolumeGroupSnapshot":
		return "group snapshot " + r.GroupSnapshotID
	}
	return "volume " + r.VolumeID
}

// call is a call-log record with the replica incarnation that made it.
type call struct {
	driver.CallRecord
	rep *replica
	inc int
}

func (c call) caller() string { return fmt.Sprintf("%s (incarnation %d)", c.rep, c.inc) }

// callAnalysis is what the driver's call log says of the replicas.
type callAnalysis struct {
	// errors are calls made by a replica that did not hold its role's Lease, and calls of
	// two replicas on one object in flight at once with both alive.
	errors []string
	// hung counts the overlaps allowed: a killed leader's call still running in the driver
	// when its successor's retry came.
	hung int
	// mutatingCalls counts the mutating calls of all replicas.
	mutatingCalls int
	// firstCall is, for each leadership, when its replica made its first call after taking
	// the Lease (zero if it made none).
	firstCall map[*leadership]time.Time
}

// analyse reads the call log against the replicas' sockets, incarnations and leaderships.
func (s *replicaSet) analyse(recs []driver.CallRecord) callAnalysis {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := callAnalysis{firstCall: map[*leadership]time.Time{}}
	bySocket := map[string]*replica{}
	for _, r := range s.roles {
		for _, rep := range r.replicas {
			if rep.socket != "" {
				bySocket[rep.socket] = rep
			}
		}
	}
	var calls []call
	for _, rec := range recs {
		rep := bySocket[rec.Endpoint]
		if rep == nil {
			continue // the test's own calls
		}
		c := call{CallRecord: rec, rep: rep, inc: rep.incarnation(rec.Start)}
		calls = append(calls, c)
		ld := s.leadershipOf(c)
		if ld != nil {
			if first, ok := a.firstCall[ld]; !ok || c.Start.Before(first) {
				a.firstCall[ld] = c.Start
			}
		}
		if !mutating[rec.Method] {
			continue
		}
		a.mutatingCalls++
		if ld == nil {
			a.errors = append(a.errors, fmt.Sprintf("%s called %s on %s at %s without holding the Lease",
				c.caller(), rec.Method, subject(rec), rec.Start.Format(time.StampMilli)))
		}
	}
	a.overlaps(calls)
	return a
}

// leadershipOf is the leadership under which c was made: of its replica's incarnation,
// taken before the call started. Called with s.mu held.
func (s *replicaSet) leadershipOf(c call) *leadership {
	var found *leadership
	for _, ld := range s.history {
		if ld.role == c.rep.role.name && ld.slot == c.rep.slot && ld.inc == c.inc && !ld.acquired.After(c.Start) {
			found = ld
		}
	}
	return found
}

// overlaps finds two callers of one role with mutating calls on one object in flight at
// once. One overlap is expected: a killed leader's call goes on in the driver (nothing
// cancels it when the caller dies) while its successor retries it; it is allowed only when
// the first caller was dead before the second call started.
func (a *callAnalysis) overlaps(calls []call) {
	type key struct{ role, subject string }
	groups := map[key][]call{}
	for _, c := range calls {
		if mutating[c.Method] {
			k := key{c.rep.role.name, subject(c.CallRecord)}
			groups[k] = append(groups[k], c)
		}
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].subject < keys[j].subject })
	for _, k := range keys {
		g := groups[k]
		slices.SortFunc(g, func(x, y call) int { return x.Start.Compare(y.Start) })
		for i, first := range g {
			for _, second := range g[i+1:] {
				if !second.Start.Before(first.End) {
					break // sorted by start: no later call overlaps first either
				}
				if first.rep == second.rep && first.inc == second.inc {
					continue
				}
				if first.inc < len(first.rep.ends) && !first.rep.ends[first.inc].After(second.Start) {
					a.hung++
					continue
				}
				a.errors = append(a.errors, fmt.Sprintf("%s: %s by %s (%s to %s) and by %s (from %s) were in flight at once, both callers alive",
					k.subject, first.Method, first.caller(), first.Start.Format(time.StampMilli), first.End.Format(time.StampMilli),
					second.caller(), second.Start.Format(time.StampMilli)))
			}
		}
	}
}

// percentiles returns the median and the maximum of ds.
func percentiles(ds []time.Duration) (p50, maximum time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
