package failover

import (
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	benchDuration  = flag.Duration("failover.duration", 2*time.Minute, "how long each run of BenchmarkFailoverThroughput measures")
	benchKillEvery = flag.Duration("failover.kill-every", 30*time.Second, "how often BenchmarkFailoverThroughput kills the leaders")
	benchWorkers   = flag.Int("failover.workers", 8, "claims BenchmarkFailoverThroughput keeps in flight")
)

// Claims provisioned and volumes attached per second, through the provisioner and the
// attacher with upstream's leader election timing: one replica of each left alone, then two
// replicas of each with both leaders killed every -failover.kill-every. Each worker
// provisions a claim, attaches its volume (a VolumeAttachment, as the attach/detach
// controller writes it), detaches it and deletes the claim, again and again. Run it with
//
//	go test ./test/e2e/failover/ -run '^$' -bench FailoverThroughput -timeout 40m
func BenchmarkFailoverThroughput(b *testing.B) {
	for _, run := range []struct {
		name     string
		replicas int
		kill     bool
	}{{"one-replica", 1, false}, {"two-replicas-killed", 2, true}} {
		b.Run(run.name, func(b *testing.B) {
			e := newEnv(b, *benchDuration+10*time.Minute, envOptions{replicas: run.replicas, timing: upstreamTiming,
				only: []string{"provisioner", "attacher"}, noDelays: true})
			if err := e.set.waitLeaders(time.Time{}, 2*time.Minute); err != nil {
				b.Fatal(err)
			}
			var provisioned, attached atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for n := range *benchWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if err := e.claimAttachDetach(fmt.Sprintf("b%d-%d", n, i), &provisioned, &attached); err != nil {
							b.Errorf("worker %d: %v", n, err)
							return
						}
					}
				}()
			}
			start := time.Now()
			kills := 0
			deadline := start.Add(*benchDuration)
			for run.kill && time.Until(deadline) > *benchKillEvery {
				time.Sleep(*benchKillEvery)
				e.set.killLeaders()
				kills++
			}
			time.Sleep(time.Until(deadline))
			p, a := provisioned.Load(), attached.Load()
			secs := time.Since(start).Seconds()
			close(stop)
			wg.Wait()
			e.checkNothingLeft()
			b.ReportMetric(float64(p)/secs, "claims/s")
			b.ReportMetric(float64(a)/secs, "attached/s")
			b.Logf("%s: %d claims provisioned (%.2f/s), %d volumes attached (%.2f/s) in %s, %d workers, leaders killed %d times (every %s), lease %s, retry %s",
				run.name, p, float64(p)/secs, a, float64(a)/secs, elapsed(time.Since(start)), *benchWorkers, kills, *benchKillEvery, e.timing.lease, e.timing.retry)
		})
	}
}

// claimAttachDetach provisions a claim, attaches its volume, detaches it and deletes the
// claim, counting the claim when it is bound and the volume when it is attached.
func (e *env) claimAttachDetach(name string, provisioned, attached *atomic.Int64) error {
	if err := e.claim(name, nil); err != nil {
		return err
	}
	pv, err := e.bound(name)
	if err != nil {
		return err
	}
	provisioned.Add(1)
	va := e.ns + "-" + name
	if err := e.attach(va, pv); err != nil {
		return err
	}
	attached.Add(1)
	if err := e.detach(va); err != nil {
		return err
	}
	return e.deleteClaim(name, pv)
}
