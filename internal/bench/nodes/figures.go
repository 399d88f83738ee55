package nodes

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/cluster/proc"
)

// Series are the figures of one run, per node where the name says so, in the order of
// figures' values: the columns of nodes.csv and the panels of nodes.svg.
var Series = []string{
	"apiserver_cpu_seconds_per_node_start",
	"apiserver_cpu_seconds_per_node_mount",
	"apiserver_idle_millicores_per_node",
	"apiserver_rss_mib_per_node",
	"apiserver_watches_per_node",
	"expected_watches_per_node",
	"agent_rss_mib",
	"agent_idle_millicores",
	"bound_to_mounted_p50_seconds",
	"bound_to_mounted_p99_seconds",
	"configmap_update_p99_seconds",
	"load_average_1m",
}

// measured is what one run observed, raw; figures turns it into Series.
type measured struct {
	nodes, podsPerNode int
	// complete: every phase was measured (the clean-up may still fail).
	complete bool
	// base0..base1 is the idle API server before any agent; started is once every agent
	// serves; bound0 is before the first binding, mounted once every pod is mounted;
	// idle0..idle1 is the idle window with everything mounted.
	base0, base1, started, bound0, mounted, idle0, idle1 apiSnapshot
	// agents0 and agents1 are the agents' usage at idle0 and idle1; agentsBaseRSS is the
	// part of agents1.RSS that is not theirs (the benchmark's own, in library mode).
	agents0, agents1 proc.Usage
	agentsBaseRSS    int64
	// mounts are the times from binding to mounted per pod, propagation from a ConfigMap
	// update to the files per pod and update.
	mounts, propagation []time.Duration
	expectedWatches     int
	load                float64
}

// baseRate is the idle API server's CPU, in cores.
func (m *measured) baseRate() float64 {
	return rate(m.base0, m.base1)
}

func rate(a, b apiSnapshot) float64 {
	if d := b.at.Sub(a.at).Seconds(); d > 0 {
		return (b.usage.CPU - a.usage.CPU).Seconds() / d
	}
	return math.NaN()
}

// cpuBeyondIdle is the API server's CPU seconds from a to b beyond what the idle API server
// would have used in that time.
func (m *measured) cpuBeyondIdle(a, b apiSnapshot) float64 {
	return (b.usage.CPU - a.usage.CPU).Seconds() - m.baseRate()*b.at.Sub(a.at).Seconds()
}

// figures are the values of Series.
func (m *measured) figures() []float64 {
	n := float64(m.nodes)
	nan := math.NaN()
	apiStart, apiMount, apiIdle, apiRSS := nan, nan, nan, nan
	if m.base0.local && m.idle1.local {
		apiStart = m.cpuBeyondIdle(m.base1, m.started) / n
		apiMount = m.cpuBeyondIdle(m.bound0, m.mounted) / n
		apiIdle = (rate(m.idle0, m.idle1) - m.baseRate()) * 1000 / n
		apiRSS = float64(m.idle1.usage.RSS-m.base0.usage.RSS) / (1 << 20) / n
	}
	idle := m.idle1.at.Sub(m.idle0.at).Seconds()
	agentIdle := nan
	if idle > 0 {
		agentIdle = (m.agents1.CPU - m.agents0.CPU).Seconds() / idle * 1000 / n
	}
	mounts, prop := report.Summarize(m.mounts), report.Summarize(m.propagation)
	p99 := nan
	if prop.Count > 0 {
		p99 = prop.P99.Seconds()
	}
	return []float64{
		apiStart, apiMount, apiIdle, apiRSS,
		float64(m.idle1.totalWatches()-m.base1.totalWatches()) / n,
		float64(m.expectedWatches),
		float64(m.agents1.RSS-m.agentsBaseRSS) / (1 << 20) / n,
		agentIdle,
		mounts.P50.Seconds(), mounts.P99.Seconds(), p99,
		m.load,
	}
}

// write prints the run's figures for humans.
func (m *measured) write(out io.Writer, agents string) {
	f := m.figures()
	fmt.Fprintf(out, "\n%d nodes × %d pods (%s agents), load average %.1f\n", m.nodes, m.podsPerNode, agents, m.load)
	if m.base0.local {
		fmt.Fprintf(out, "apiserver, idle before the agents: %.0f millicores, RSS %.0f MiB\n", m.baseRate()*1000, float64(m.base0.usage.RSS)/(1<<20))
		fmt.Fprintf(out, "apiserver CPU per node: %.3f s for its agent's start, %.3f s for binding and mounting its %d pods (beyond idle)\n", f[0], f[1], m.podsPerNode)
		fmt.Fprintf(out, "apiserver at idle with everything mounted: %.2f millicores per node beyond idle; RSS %+.2f MiB per node (its pods included)\n", f[2], f[3])
	} else {
		fmt.Fprintln(out, "apiserver CPU and RSS: not measured (its process is not on this machine)")
	}
	fmt.Fprintf(out, "apiserver watches: %+d (%s) = %.2f per node; expected %d per node (the agent's fixed watches + one per referenced object)\n",
		m.idle1.totalWatches()-m.base1.totalWatches(), delta(m.base1.watches, m.idle1.watches), f[4], m.expectedWatches)
	if m.idle1.registered >= 0 {
		fmt.Fprintf(out, "apiserver_registered_watchers: %+d\n", m.idle1.registered-m.base1.registered)
	}
	fmt.Fprintf(out, "agent at idle: RSS %.1f MiB, CPU %.3f millicores (per agent)\n", f[6], f[7])
	mounts := report.Summarize(m.mounts)
	fmt.Fprintf(out, "bound → mounted (%d pods): p50 %s, p99 %s, max %s\n", mounts.Count, report.Round(mounts.P50), report.Round(mounts.P99), report.Round(mounts.Max))
	if prop := report.Summarize(m.propagation); prop.Count > 0 {
		fmt.Fprintf(out, "ConfigMap update → files (%d volume updates): p50 %s, p99 %s, max %s\n", prop.Count, report.Round(prop.P50), report.Round(prop.P99), report.Round(prop.Max))
	}
}
