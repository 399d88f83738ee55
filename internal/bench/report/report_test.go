package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}} {
		if got := Percentile(v, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("empty = %v", got)
	}
}

func TestSummarizeIgnoresIncomplete(t *testing.T) {
	s := Summarize([]time.Duration{3 * time.Second, -1, time.Second, 2 * time.Second})
	if s.Count != 3 || s.Min != time.Second || s.Max != 3*time.Second || s.P50 != 2*time.Second || s.Avg != 2*time.Second {
		t.Fatalf("unexpected %+v", s)
	}
}

func TestOutputs(t *testing.T) {
	r := &Run{Series: []string{"pv_created", "bound"}, Samples: []Sample{
		{Name: "a", Start: 0, Values: []time.Duration{time.Second, 2 * time.Second}},
		{Name: "b", Start: time.Second, Values: []time.Duration{500 * time.Millisecond, -1}},
	}}
	var csv bytes.Buffer
	if err := r.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	want := "name,start_seconds,pv_created_seconds,bound_seconds\na,0.000000,1.000000,2.000000\nb,1.000000,0.500000,\n"
	if csv.String() != want {
		t.Errorf("csv:\n%s\nwant:\n%s", csv.String(), want)
	}
	var svg bytes.Buffer
	if err := r.WriteSVG(&svg, "t <1>"); err != nil {
		t.Fatal(err)
	}
	if s := svg.String(); !strings.HasPrefix(s, "<svg") || strings.Count(s, "<circle") != 3+2 || !strings.Contains(s, "t &lt;1&gt;") {
		t.Errorf("svg unexpected:\n%s", s)
	}
	var tab bytes.Buffer
	r.WriteTable(&tab)
	if !strings.Contains(tab.String(), "pv_created") {
		t.Errorf("table: %s", tab.String())
	}
	var bar bytes.Buffer
	p := NewProgress(&bar, "provision", 4)
	p.Set(4)
	p.Finish()
	if !strings.Contains(bar.String(), "4/4 100.0%") {
		t.Errorf("bar: %q", bar.String())
	}
}
