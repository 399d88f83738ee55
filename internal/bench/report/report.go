// Package report holds what every kubevol benchmark prints and writes: latency percentiles,
// a terminal progress bar, a CSV of the raw samples and an SVG plot of latency over time.
package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

// Sample is one measured operation: when it started (relative to the run start) and how
// long each named phase took. A negative duration means the phase did not complete.
type Sample struct {
	Name  string
	Start time.Duration
	// Values are the latencies, in the order of the Series of the Run they belong to.
	Values []time.Duration
}

// Run is the raw data of one benchmark run.
type Run struct {
	// Series names the columns of Sample.Values, e.g. "pv_created", "bound".
	Series  []string
	Samples []Sample
}

// Stats summarises one series.
type Stats struct {
	Count         int
	Min, Max, Avg time.Duration
	P50, P90, P99 time.Duration
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted values, by the
// nearest-rank method, so that every reported figure is a value that was measured.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// Summarize computes the statistics of values, ignoring negative (incomplete) ones.
func Summarize(values []time.Duration) Stats {
	v := make([]time.Duration, 0, len(values))
	var sum time.Duration
	for _, d := range values {
		if d >= 0 {
			v = append(v, d)
			sum += d
		}
	}
	if len(v) == 0 {
		return Stats{}
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return Stats{
		Count: len(v),
		Min:   v[0],
		Max:   v[len(v)-1],
		Avg:   sum / time.Duration(len(v)),
		P50:   Percentile(v, 50),
		P90:   Percentile(v, 90),
		P99:   Percentile(v, 99),
	}
}

// Column returns the values of series i over all samples.
func (r *Run) Column(i int) []time.Duration {
	out := make([]time.Duration, len(r.Samples))
	for j, s := range r.Samples {
		if i < len(s.Values) {
			out[j] = s.Values[i]
		} else {
			out[j] = -1
		}
	}
	return out
}

// WriteTable prints one line of statistics per series.
func (r *Run) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-22s %6s %9s %9s %9s %9s %9s\n", "latency", "n", "p50", "p90", "p99", "max", "avg")
	for i, name := range r.Series {
		s := Summarize(r.Column(i))
		fmt.Fprintf(w, "%-22s %6d %9s %9s %9s %9s %9s\n", name, s.Count,
			Round(s.P50), Round(s.P90), Round(s.P99), Round(s.Max), Round(s.Avg))
	}
}

// Round shortens a duration for humans: milliseconds below 10 s, else tenths of a second.
func Round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
