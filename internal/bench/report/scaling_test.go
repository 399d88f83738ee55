package report

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScalingCSVRoundTripAndUpsert(t *testing.T) {
	s := &Scaling{Group: "agents", X: "nodes", Series: []string{"a_seconds", "b_mib"}}
	s.Upsert(ScalingRow{Group: "process", X: 100, Values: []float64{2, math.NaN()}})
	s.Upsert(ScalingRow{Group: "process", X: 10, Values: []float64{1, 3.5}})
	s.Upsert(ScalingRow{Group: "library", X: 1000, Values: []float64{4, 5}})
	s.Upsert(ScalingRow{Group: "process", X: 10, Values: []float64{1.5, 3}}) // replaces
	var buf bytes.Buffer
	if err := s.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	want := "agents,nodes,a_seconds,b_mib\nlibrary,1000,4,5\nprocess,10,1.5,3\nprocess,100,2,\n"
	if buf.String() != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", buf.String(), want)
	}
	back, err := ReadScalingCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 3 || back.Rows[2].X != 100 || !math.IsNaN(back.Rows[2].Values[1]) || back.Rows[1].Values[0] != 1.5 {
		t.Fatalf("read back %+v", back.Rows)
	}
}

func TestScalingSVG(t *testing.T) {
	s := &Scaling{Group: "agents", X: "nodes", Series: []string{"watches_per_node", "p99 <s>"}, Rows: []ScalingRow{
		{Group: "process", X: 10, Values: []float64{4, 0.5}},
		{Group: "process", X: 100, Values: []float64{4, math.NaN()}},
		{Group: "library", X: 1000, Values: []float64{3, 2}},
	}}
	// A negative value stays inside its panel: the axis starts below zero.
	s.Rows[2].Values[0] = -3
	var buf bytes.Buffer
	if err := s.WriteSVG(&buf, "nodes"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// 5 measured points plus 2 legend dots; one line (process in the first panel only has
	// two points in it); the log axis has ticks 10, 100, 1000 in each panel.
	if got := strings.Count(out, "<circle"); got != 5+2 {
		t.Errorf("%d circles", got)
	}
	if got := strings.Count(out, "<polyline"); got != 1 {
		t.Errorf("%d polylines", got)
	}
	if !strings.Contains(out, ">1000</text>") || !strings.Contains(out, "p99 &lt;s&gt;") || !strings.Contains(out, ">-5</text>") {
		t.Errorf("axis or escaped title missing:\n%s", out)
	}
}

func TestScalingWriteFilesAccumulates(t *testing.T) {
	dir := t.TempDir()
	mk := func(x float64, v float64) *Scaling {
		return &Scaling{Group: "agents", X: "nodes", Series: []string{"v"}, Rows: []ScalingRow{{Group: "process", X: x, Values: []float64{v}}}}
	}
	for _, s := range []*Scaling{mk(10, 1), mk(100, 2), mk(10, 3)} {
		if err := s.WriteFiles(dir, "nodes", "t", io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "nodes.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "agents,nodes,v\nprocess,10,3\nprocess,100,2\n"; string(data) != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", data, want)
	}
	// Other columns: the old file is replaced, not merged.
	other := &Scaling{Group: "agents", X: "nodes", Series: []string{"w"}, Rows: []ScalingRow{{Group: "library", X: 1, Values: []float64{7}}}}
	if err := other.WriteFiles(dir, "nodes", "t", io.Discard); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(filepath.Join(dir, "nodes.csv"))
	if want := "agents,nodes,w\nlibrary,1,7\n"; string(data) != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", data, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "nodes.svg")); err != nil {
		t.Fatal(err)
	}
}
