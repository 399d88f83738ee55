package failover

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// role is one controller role, run as a set of replicas sharing its ServiceAccount and its
// Lease, as a Deployment's pods do.
type role struct {
	name     string // the kubevol subcommand: provisioner, attacher, ...
	lease    string
	replicas []*replica
}

// replica is one slot of a role: a process that is killed and started again (a container
// restarted by its kubelet) and its own socket of the driver, so that the driver's call log
// names it.
type replica struct {
	role   *role
	slot   int
	socket string // "" for a role that calls no driver
	args   []string
	proc   *framework.Process
	// ends are when each incarnation but the running one died: incarnation i ran until
	// ends[i] (i counts from 0).
	ends []time.Time
}

func (r *replica) String() string { return fmt.Sprintf("%s-%d", r.role.name, r.slot) }

// incarnation is the incarnation of r that was running at time at.
func (r *replica) incarnation(at time.Time) int {
	n := 0
	for _, end := range r.ends {
		if !end.After(at) {
			n++
		}
	}
	return n
}

// leadership is one holding of a Lease, as the lease watcher saw it.
type leadership struct {
	role        string
	slot, inc   int
	identity    string
	acquired    time.Time
	takeoverOf  *kill // the kill this leadership followed, nil for the first holder
	replicaName string
}

// kill is one SIGKILL of a role's leader.
type kill struct {
	role string
	slot int
	at   time.Time
}

// replicaSet is every role's replicas, the Leases they hold, and the kills of their leaders.
type replicaSet struct {
	t     testing.TB
	ctx   context.Context
	cs    kubernetes.Interface
	ns    string
	roles []*role

	mu      sync.Mutex
	holders map[string]*leadership // current holder of each role's Lease
	history []*leadership
	kills   []*kill
	dying   map[*replica]bool // killed by the test, not yet started again
}

func newReplicaSet(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns string) *replicaSet {
	return &replicaSet{t: t, ctx: ctx, cs: cs, ns: ns, holders: map[string]*leadership{}, dying: map[*replica]bool{}}
}

// add starts n replicas of a role with args; socket(slot) is the driver socket of a slot
// ("" for none), which the args of that slot get as --csi-address.
func (s *replicaSet) add(name, lease string, n int, socket func(int) string, args ...string) *role {
	s.t.Helper()
	r := &role{name: name, lease: lease}
	for slot := range n {
		rep := &replica{role: r, slot: slot, socket: socket(slot)}
		rep.args = append([]string{name}, args...)
		if rep.socket != "" {
			rep.args = append(rep.args, "--csi-address", "unix://"+rep.socket)
		}
		rep.proc = framework.StartKubevol(s.t, rep.args...)
		r.replicas = append(r.replicas, rep)
	}
	s.mu.Lock()
	s.roles = append(s.roles, r)
	s.mu.Unlock()
	return r
}

// watch follows every role's Lease until ctx ends, recording each new holder, and starts a
// replica again whenever it exited on its own (a replica that lost its Lease exits, as
// upstream's do, and its kubelet would restart it).
func (s *replicaSet) watch(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, r := range s.roles {
			s.observe(ctx, r)
			for _, rep := range r.replicas {
				s.mu.Lock()
				dying := s.dying[rep]
				s.mu.Unlock()
				if !dying && rep.proc.Exited() && ctx.Err() == nil {
					s.t.Logf("%s exited on its own: starting it again", rep)
					s.mu.Lock()
					rep.ends = append(rep.ends, time.Now())
					s.mu.Unlock()
					rep.proc.Start()
				}
			}
		}
	}
}

// observe reads the role's Lease and records a new holder.
func (s *replicaSet) observe(ctx context.Context, r *role) {
	l, err := s.cs.CoordinationV1().Leases(s.ns).Get(ctx, r.lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return
	}
	id := *l.Spec.HolderIdentity
	s.mu.Lock()
	cur := s.holders[r.name]
	s.mu.Unlock()
	if cur != nil && cur.identity == id {
		return
	}
	rep := s.replicaOf(r, id)
	if rep == nil {
		return // its log line comes just after the Lease write: next time
	}
	acquired := time.Now()
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ld := &leadership{role: r.name, slot: rep.slot, inc: rep.incarnation(acquired), identity: id, acquired: acquired, replicaName: rep.String()}
	for i := len(s.kills) - 1; i >= 0; i-- {
		if k := s.kills[i]; k.role == r.name && k.at.Before(acquired) {
			if cur != nil && cur.slot == k.slot && cur.acquired.Before(k.at) {
				ld.takeoverOf = k
			}
			break
		}
	}
	s.holders[r.name] = ld
	s.history = append(s.history, ld)
}

// replicaOf finds the replica whose log says it became the leader as identity.
func (s *replicaSet) replicaOf(r *role, identity string) *replica {
	for _, rep := range r.replicas {
		data, err := os.ReadFile(rep.proc.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "Became the leader") && strings.Contains(line, `"`+identity+`"`) {
				return rep
			}
		}
	}
	return nil
}

// holder is the role's current leader, once one is known.
func (s *replicaSet) holder(r *role) *leadership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holders[r.name]
}

// waitLeaders waits until every role has a leader that is not older than since.
func (s *replicaSet) waitLeaders(since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		for _, r := range s.roles {
			if h := s.holder(r); h == nil || h.acquired.Before(since) {
				missing = append(missing, r.name)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no new leader of %s within %s", strings.Join(missing, ", "), timeout)
		}
		select {
		case <-s.ctx.Done():
			return s.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// killLeaders sends SIGKILL to the leader of every role, records when each died, and starts
// each again at once, as a standby.
func (s *replicaSet) killLeaders() {
	for _, r := range s.roles {
		h := s.holder(r)
		if h == nil {
			s.t.Errorf("%s has no leader to kill", r.name)
			continue
		}
		rep := r.replicas[h.slot]
		s.mu.Lock()
		s.dying[rep] = true
		s.mu.Unlock()
		rep.proc.Kill()
		at := time.Now()
		s.mu.Lock()
		rep.ends = append(rep.ends, at)
		s.kills = append(s.kills, &kill{role: r.name, slot: h.slot, at: at})
		s.mu.Unlock()
		rep.proc.Start()
		s.mu.Lock()
		delete(s.dying, rep)
		s.mu.Unlock()
	}
}

// socketPath is the driver socket of a role's slot under dir.
func socketPath(dir, role string, slot int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d.sock", role, slot))
}
