// Package kubelet is `kubevol bench kubelet`: the upstream kubelet with its own volume
// manager and with kubevol's, the same binary, one after the other on throwaway `kubevol up
// --runtime containerd` stacks. It runs the cases of Kubernetes' perf-tests storage
// pod-startup suite on one node (many pods with one volume each, one pod with many
// ConfigMaps, one pod with many PVs) and measures pod creation to Running; then, on pods
// with five volumes each, a ConfigMap update until the new content is read inside each
// running container, and the kubelet's CPU and RSS at idle.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/cluster/up"
)

// Config is what one run measures.
type Config struct {
	// Pods is the number of pods of the many-pods cases; Volumes the number of volumes of
	// the one-pod cases.
	Pods, Volumes int
	// Managers are the volume managers to compare, in order: kubeletnode.VolumeManagerKubelet
	// and VolumeManagerKubevol.
	Managers []string
	// Idle is how long the kubelet's CPU is sampled at idle.
	Idle time.Duration
	// Startup and Update run the pod-startup cases and the update and idle measurement.
	Startup, Update bool
	// Timeout bounds each case.
	Timeout       time.Duration
	ClusterBinary string
	OutDir        string
	Out           io.Writer
}

// A case is one pod-startup measurement: pods pods, each with the volumes vols makes.
type podCase struct {
	name string
	pods int
	// kinds are the volume kinds of each pod, one volume per entry.
	kinds []string
}

// Volume kinds.
const (
	kindConfigMap = "configMap"
	kindSecret    = "secret"
	kindDownward  = "downwardAPI"
	kindEmptyDir  = "emptyDir"
	kindPV        = "pv"
)

func (c Config) cases() []podCase {
	var out []podCase
	for _, k := range []string{kindConfigMap, kindSecret, kindDownward, kindEmptyDir, kindPV} {
		out = append(out, podCase{name: fmt.Sprintf("%d pods × 1 %s", c.Pods, k), pods: c.Pods, kinds: []string{k}})
	}
	out = append(out,
		podCase{name: fmt.Sprintf("1 pod × %d configMaps", c.Volumes), pods: 1, kinds: repeat(kindConfigMap, c.Volumes)},
		podCase{name: fmt.Sprintf("1 pod × %d PVs", c.Volumes), pods: 1, kinds: repeat(kindPV, c.Volumes)})
	return out
}

// measuredCases are the cases a run measures: none without Startup.
func (c Config) measuredCases() []podCase {
	if !c.Startup {
		return nil
	}
	return c.cases()
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// result is one volume manager's figures.
type result struct {
	manager string
	// startup holds each case's pod creation to Running, by case name; onNode its pod
	// binding to the node to Running.
	startup, onNode map[string]report.Stats
	update          report.Stats
	// idleCPU is the kubelet's CPU share at idle (cores), rssMiB its resident memory.
	idleCPU, rssMiB float64
	// load is the machine's load average (1 min) before and after the update and idle
	// measurement, which the stacks take one after the other.
	load [2]string
}

// Run measures every volume manager in turn and prints the table, then writes the CSV and
// SVG files.
func Run(ctx context.Context, cfg Config) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("bench kubelet runs containers and mounts volumes: run it as root")
	}
	if err := kubeletnode.CheckPrerequisites(); err != nil {
		return err
	}
	// Both stacks run at once and take turns, case by case, each going first once: whatever
	// else loads the machine then weighs on both rows alike.
	benches := make([]*bench, len(cfg.Managers))
	defer func() {
		for _, b := range benches {
			if b != nil {
				err = errors.Join(err, b.stop())
			}
		}
	}()
	results := make([]result, len(cfg.Managers))
	for i, vm := range cfg.Managers {
		fmt.Fprintf(cfg.Out, "volume manager %s: starting a throwaway kubevol up --runtime containerd stack\n", vm)
		if benches[i], err = start(ctx, cfg, vm); err != nil {
			return fmt.Errorf("volume manager %s: %w", vm, err)
		}
		results[i] = result{manager: vm, startup: map[string]report.Stats{}, onNode: map[string]report.Stats{}}
	}
	for _, c := range cfg.cases() {
		if !cfg.Startup {
			break
		}
		// Each case runs twice, each volume manager once first and once second: the one
		// that goes second starts its pods while the kernel still tears down the first's
		// (network namespaces, cgroups) although the CPUs are idle again, and a case run
		// in one order measured the order more than the volume manager.
		toRunning := make([][]time.Duration, len(benches))
		onNode := make([][]time.Duration, len(benches))
		for rep := range len(benches) {
			for k := range benches {
				i := (k + rep) % len(benches)
				waited := quiet(ctx, time.Minute)
				d, bound, err := benches[i].startup(ctx, c)
				if err != nil {
					return fmt.Errorf("volume manager %s: %s: %w", cfg.Managers[i], c.name, err)
				}
				toRunning[i], onNode[i] = append(toRunning[i], d...), append(onNode[i], bound...)
				st := report.Summarize(d)
				fmt.Fprintf(cfg.Out, "  %-8s %-28s p50 %8s  p90 %8s  p99 %8s  bound to Running p50 %8s  (went %d; waited %s for a quiet machine; load %s)\n",
					cfg.Managers[i], c.name, report.Round(st.P50), report.Round(st.P90), report.Round(st.P99),
					report.Round(report.Summarize(bound).P50), k+1, report.Round(waited), loadAverage())
			}
		}
		for i := range benches {
			results[i].startup[c.name], results[i].onNode[c.name] = report.Summarize(toRunning[i]), report.Summarize(onNode[i])
		}
	}
	for i, b := range benches {
		if !cfg.Update {
			break
		}
		r := &results[i]
		r.load[0] = loadAverage()
		if r.update, r.idleCPU, r.rssMiB, err = b.updateAndIdle(ctx); err != nil {
			return fmt.Errorf("volume manager %s: %w", cfg.Managers[i], err)
		}
		r.load[1] = loadAverage()
		fmt.Fprintf(cfg.Out, "  %-8s ConfigMap update in %d containers: p50 %s  p99 %s; kubelet idle %.3f cores, RSS %.0f MiB; load %s to %s\n",
			r.manager, cfg.Pods, report.Round(r.update.P50), report.Round(r.update.P99), r.idleCPU, r.rssMiB, r.load[0], r.load[1])
	}
	printTable(cfg, results)
	return writeFiles(cfg, results)
}

// start starts a stack whose kubelet runs the volume manager vm.
func start(ctx context.Context, cfg Config, vm string) (*bench, error) {
	dir, err := os.MkdirTemp("", "kubevol-bench-kubelet-")
	if err != nil {
		return nil, err
	}
	stack, err := up.Start(ctx, up.Options{Dir: filepath.Join(dir, "up"), ClusterBinary: cfg.ClusterBinary, NodeName: "bench-" + vm,
		Progress: io.Discard, UnsafeNoFsync: true, Runtime: up.RuntimeContainerd, VolumeManager: vm})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	b, err := newBench(ctx, cfg, stack, dir)
	if err != nil {
		return nil, errors.Join(err, stack.Stop(), os.RemoveAll(dir))
	}
	return b, nil
}

func printTable(cfg Config, results []result) {
	out := cfg.Out
	fmt.Fprintf(out, "\nthe kubelet v1.37.2 with each volume manager, the same binary, one node (this machine):\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "figure\t"
	for _, r := range results {
		head += r.manager + "\t"
	}
	if len(results) == 2 {
		head += results[0].manager + " / " + results[1].manager + "\t"
	}
	fmt.Fprintln(w, head)
	row := func(name string, v func(result) float64, unit string) {
		line := name + "\t"
		for _, r := range results {
			line += fmt.Sprintf("%.3g %s\t", v(r), unit)
		}
		if len(results) == 2 {
			line += fmt.Sprintf("%.2f×\t", ratio(v(results[0]), v(results[1])))
		}
		fmt.Fprintln(w, line)
	}
	for _, c := range cfg.measuredCases() {
		for _, p := range []struct {
			name string
			get  func(report.Stats) time.Duration
		}{{"p50", func(s report.Stats) time.Duration { return s.P50 }}, {"p90", func(s report.Stats) time.Duration { return s.P90 }},
			{"p99", func(s report.Stats) time.Duration { return s.P99 }}} {
			row(c.name+" to Running "+p.name, func(r result) float64 { return p.get(r.startup[c.name]).Seconds() }, "s")
		}
		row(c.name+" bound to Running p50", func(r result) float64 { return r.onNode[c.name].P50.Seconds() }, "s")
	}
	if cfg.Update {
		row("ConfigMap update in the container p50", func(r result) float64 { return r.update.P50.Seconds() }, "s")
		row("ConfigMap update in the container p99", func(r result) float64 { return r.update.P99.Seconds() }, "s")
		row("kubelet CPU at idle", func(r result) float64 { return r.idleCPU }, "cores")
		row("kubelet RSS at idle", func(r result) float64 { return r.rssMiB }, "MiB")
		line := "load average (1 min) around the idle and update figures\t"
		for _, r := range results {
			line += r.load[0] + " to " + r.load[1] + "\t"
		}
		fmt.Fprintln(w, line)
	}
	_ = w.Flush()
}

// ratio is a/b: how many times the second volume manager is better for a figure where
// less is better.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

// writeFiles writes kubelet.csv and kubelet.svg: one row per volume manager and figure.
func writeFiles(cfg Config, results []result) error {
	s := &report.Scaling{Group: "volume_manager", X: "case", Series: []string{"p50_seconds", "p90_seconds", "p99_seconds", "bound_p50_seconds"}}
	var legend []string
	for i, c := range cfg.measuredCases() {
		legend = append(legend, fmt.Sprintf("%d: %s", i+1, c.name))
		for _, r := range results {
			st, onNode := r.startup[c.name], r.onNode[c.name]
			s.Upsert(report.ScalingRow{Group: r.manager, X: float64(i + 1), Values: []float64{st.P50.Seconds(), st.P90.Seconds(), st.P99.Seconds(), onNode.P50.Seconds()}})
		}
	}
	if n := len(cfg.measuredCases()) + 1; cfg.Update {
		legend = append(legend, fmt.Sprintf("%d: ConfigMap update read in %d containers", n, cfg.Pods))
		for _, r := range results {
			s.Upsert(report.ScalingRow{Group: r.manager, X: float64(n), Values: []float64{r.update.P50.Seconds(), r.update.P90.Seconds(), r.update.P99.Seconds(), math.NaN()}})
		}
	}
	title := "kubelet pod startup by volume manager (cases: " + strings.Join(legend, "; ") + ")"
	return s.WriteFiles(cfg.OutDir, "kubelet", title, cfg.Out)
}
