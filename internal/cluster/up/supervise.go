package up

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/proc"
)

// Backoff is how a supervised component is restarted, in the kubelet's manner for a
// container that exits: the first restart waits Initial, each further one twice as long up
// to Max, and a component that ran for ResetAfter is back at Initial.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

// DefaultBackoff is the kubelet's CrashLoopBackOff (10 s doubling to 5 min, reset after
// 10 min of running), except that the first restart waits 1 s: a kubevol component
// recovers its state from the API and the disk, and a node agent away for 10 s would stall
// every mount for no gain.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 5 * time.Minute, ResetAfter: 10 * time.Minute}

// next is the wait before the next restart, after a run of ran that followed a wait of last.
func (b Backoff) next(last, ran time.Duration) time.Duration {
	if last <= 0 || ran >= b.ResetAfter {
		return b.Initial
	}
	return min(2*last, b.Max)
}

// component is a kubevol child process that up restarts when it exits.
type component struct {
	name    string // "kubevol node", "<driver> provisioner"
	bin     string
	args    []string
	env     []string
	logPath string
	health  string                      // URL of /healthz, or "" for none
	check   func(context.Context) error // when set, the health check instead of health

	mu       sync.Mutex
	p        *proc.Process
	started  time.Time
	restarts int
	stopping bool
	stopCh   chan struct{}
	loopDone chan struct{}
}

func newComponent(name, bin string, args []string, logPath, health string) *component {
	return &component{name: name, bin: bin, args: args, logPath: logPath, health: health,
		stopCh: make(chan struct{}), loopDone: make(chan struct{})}
}

func (c *component) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return errors.New("stopping")
	}
	p, err := proc.StartEnv(c.name, c.bin, c.args, c.env, c.logPath)
	if err != nil {
		return err
	}
	c.p, c.started = p, time.Now()
	return nil
}

func (c *component) current() *proc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

// supervise restarts the component each time it exits, until stop; report receives one line
// per exit and per failed restart.
func (c *component) supervise(b Backoff, report func(string)) {
	defer close(c.loopDone)
	var delay time.Duration
	for {
		p := c.current()
		select {
		case <-p.Done():
		case <-c.stopCh:
			return
		}
		c.mu.Lock()
		ran := time.Since(c.started)
		c.mu.Unlock()
		delay = b.next(delay, ran)
		report(fmt.Sprintf("%s exited (%s) after %s; restarting in %s", c.name, proc.ExitReason(p.Err()), ran.Round(time.Millisecond), delay))
		for {
			select {
			case <-time.After(delay):
			case <-c.stopCh:
				return
			}
			err := c.start()
			if err == nil {
				break
			}
			if c.isStopping() {
				return
			}
			delay = b.next(delay, 0)
			report(fmt.Sprintf("%s: restart failed: %v; retrying in %s", c.name, err, delay))
		}
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
	}
}

func (c *component) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

// stop ends supervision, then the process.
func (c *component) stop(grace time.Duration) error {
	c.mu.Lock()
	if !c.stopping {
		c.stopping = true
		close(c.stopCh)
	}
	p := c.p
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop(grace)
}

// status reports the running process (or the last one, while a restart waits).
func (c *component) status(ctx context.Context) localcluster.ComponentStatus {
	c.mu.Lock()
	p, restarts := c.p, c.restarts
	c.mu.Unlock()
	st := localcluster.StatusOf(ctx, p, c.probe)
	st.Name, st.Restarts = c.name, restarts
	if !st.Running {
		st.Detail = "restarting after " + proc.ExitReason(p.Err())
	}
	return st
}

// Events receives one line per component exit, restart failure and control plane restart,
// for the command line to print.
func (s *Stack) Events() <-chan string { return s.events }

// Failed receives the error that ends the stack: etcd or the kube-apiserver lost for good.
func (s *Stack) Failed() <-chan error { return s.failed }

func (s *Stack) report(line string) {
	select {
	case s.events <- line:
	default: // nobody reads: the lines are also in the components' logs
	}
}

// lostAfter is how many restarts of etcd or the kube-apiserver in a row may fail to become
// ready before up gives the cluster up for lost.
const lostAfter = 3

// startClusterSupervision restarts control plane components that exit, each on its own,
// with the same backoff as the kubevol components. The controller-manager and the scheduler
// are retried until they come back. etcd and the kube-apiserver too, but when lostAfter of
// their restarts in a row do not become ready, the cluster is lost for good and the stack
// fails: every other component needs them.
func (s *Stack) startClusterSupervision() {
	ctx, cancel := context.WithCancel(context.Background())
	s.superStop, s.superDone = cancel, make(chan struct{})
	var wg sync.WaitGroup
	for _, name := range []string{localcluster.Etcd, localcluster.APIServer, localcluster.ControllerManager, localcluster.Scheduler} {
		if s.Cluster.Process(name) == nil {
			continue
		}
		wg.Go(func() { s.superviseClusterComponent(ctx, name) })
	}
	go func() { wg.Wait(); close(s.superDone) }()
}

func (s *Stack) superviseClusterComponent(ctx context.Context, name string) {
	critical := name == localcluster.Etcd || name == localcluster.APIServer
	started := time.Now()
	var delay time.Duration
	failures := 0
	for {
		p := s.Cluster.Process(name)
		if p == nil {
			return
		}
		select {
		case <-p.Done():
		case <-ctx.Done():
			return
		}
		ran := time.Since(started)
		delay = s.opts.Backoff.next(delay, ran)
		s.report(fmt.Sprintf("%s exited (%s) after %s; restarting in %s; see %s", name, proc.ExitReason(p.Err()), ran.Round(time.Millisecond), delay, s.Cluster.LogPath(name)))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
		started = time.Now()
		err := s.Cluster.Respawn(ctx, name)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if critical && failures >= lostAfter {
				select {
				case s.failed <- fmt.Errorf("%s did not come back after %d restarts: %w", name, failures, err):
				default:
				}
				return
			}
			s.report(fmt.Sprintf("%s: restart failed: %v", name, err))
			continue
		}
		failures = 0
		s.mu.Lock()
		s.restarts[name]++
		s.mu.Unlock()
		s.report(name + " restarted")
	}
}
