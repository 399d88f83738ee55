package driver_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// BenchmarkRoundTrip times CreateVolume → NodeStage → NodePublish → NodeUnpublish →
// NodeUnstage → DeleteVolume per backend, over gRPC on the unix socket, and reports the p50
// and p99 of each call in milliseconds. The driver must never be the bottleneck of the
// provisioning benchmark; the goal for dir CreateVolume is p99 < 5 ms.
func BenchmarkRoundTrip(b *testing.B) {
	drivertest.RequireRoot(b)
	for _, typ := range []string{"dir", "block"} {
		b.Run(typ, func(b *testing.B) {
			in := drivertest.Start(b, driver.Config{Logger: logr.Discard()})
			c := clients{ctrl: in.Controller, node: in.Node}
			vc := mountCap("")
			ops := []string{"CreateVolume", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}
			lat := map[string][]time.Duration{}
			timed := func(op string, f func()) {
				start := time.Now()
				f()
				lat[op] = append(lat[op], time.Since(start))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("bench-%d", i)
				staging, target := in.Path("staging", name), in.Path("pods", name)
				var id string
				timed(ops[0], func() { id = c.create(b, name, typ, 64<<20).GetVolumeId() })
				timed(ops[1], func() { c.stage(b, id, staging, vc) })
				timed(ops[2], func() { c.publish(b, id, staging, target, vc) })
				timed(ops[3], func() { c.unpublish(b, id, target) })
				timed(ops[4], func() { c.unstage(b, id, staging) })
				timed(ops[5], func() { c.delete(b, id) })
			}
			b.StopTimer()
			for _, op := range ops {
				p50, p99 := percentiles(lat[op])
				b.ReportMetric(p50, op+"-p50-ms")
				b.ReportMetric(p99, op+"-p99-ms")
			}
		})
	}
}

func percentiles(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q * float64(len(s)-1))
		return float64(s[i].Microseconds()) / 1000
	}
	return at(0.50), at(0.99)
}

// BenchmarkCreateVolume times CreateVolume alone, the call the provisioning benchmark
// depends on, per backend.
func BenchmarkCreateVolume(b *testing.B) {
	drivertest.RequireRoot(b)
	for _, typ := range []string{"dir", "block"} {
		b.Run(typ, func(b *testing.B) {
			in := drivertest.Start(b, driver.Config{Capacity: 1 << 50, Logger: logr.Discard()})
			c := clients{ctrl: in.Controller, node: in.Node}
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				c.create(b, fmt.Sprintf("bench-%d", i), typ, 64<<20)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			p50, p99 := percentiles(lat)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
		})
	}
}

// BenchmarkCreateVolumeParallel times CreateVolume with 16 clients calling at once, the load
// a provisioner with 16 workers puts on the driver. Every call persists the controller
// document; with group commit one write and fsync covers the changes of all calls waiting
// at that moment, so the p99 should stay near one fsync instead of growing with the queue.
// It reports the p50 and p99 of a call in milliseconds and the calls per second.
func BenchmarkCreateVolumeParallel(b *testing.B) {
	drivertest.RequireRoot(b)
	const clientsN = 16
	in := drivertest.Start(b, driver.Config{Capacity: 1 << 50, Logger: logr.Discard()})
	c := clients{ctrl: in.Controller, node: in.Node}
	lat := make([][]time.Duration, clientsN)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range clientsN {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				t0 := time.Now()
				if _, err := c.ctrl.CreateVolume(ctxT(b), createReq(fmt.Sprintf("bench-%d", i), "dir", 64<<20)); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	p50, p99 := percentiles(slices.Concat(lat...))
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}
