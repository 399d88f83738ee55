package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Scaling is figures measured at several sizes of one parameter (X, e.g. the node count),
// in groups (e.g. how the agents ran): one row per group and size. Where Run holds the
// samples of one run, Scaling holds one summary row per run, so that runs made one at a
// time end up in one table and one plot.
type Scaling struct {
	// Group and X are the names of the first two columns, e.g. "agents" and "nodes".
	Group, X string
	// Series name the other columns, with their unit, e.g. "apiserver_cpu_seconds_per_node".
	Series []string
	Rows   []ScalingRow
}

// ScalingRow is one run's figures; a NaN value was not measured.
type ScalingRow struct {
	Group  string
	X      float64
	Values []float64
}

// Upsert adds row, replacing the row of the same group and X, and keeps the rows ordered
// by group, then X.
func (s *Scaling) Upsert(row ScalingRow) {
	s.Rows = slices.DeleteFunc(s.Rows, func(r ScalingRow) bool { return r.Group == row.Group && r.X == row.X })
	s.Rows = append(s.Rows, row)
	sort.SliceStable(s.Rows, func(i, j int) bool {
		if s.Rows[i].Group != s.Rows[j].Group {
			return s.Rows[i].Group < s.Rows[j].Group
		}
		return s.Rows[i].X < s.Rows[j].X
	})
}

func (s *Scaling) header() []string { return append([]string{s.Group, s.X}, s.Series...) }

// WriteCSV writes the header and one line per row; a value not measured is empty.
func (s *Scaling) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(s.header()); err != nil {
		return err
	}
	for _, r := range s.Rows {
		line := []string{r.Group, strconv.FormatFloat(r.X, 'g', -1, 64)}
		for i := range s.Series {
			v := ""
			if i < len(r.Values) && !math.IsNaN(r.Values[i]) {
				v = strconv.FormatFloat(r.Values[i], 'g', 6, 64)
			}
			line = append(line, v)
		}
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadScalingCSV reads what WriteCSV wrote.
func ReadScalingCSV(r io.Reader) (*Scaling, error) {
	lines, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 || len(lines[0]) < 2 {
		return nil, errors.New("no header")
	}
	s := &Scaling{Group: lines[0][0], X: lines[0][1], Series: lines[0][2:]}
	for n, line := range lines[1:] {
		x, err := strconv.ParseFloat(line[1], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", n+2, s.X, err)
		}
		row := ScalingRow{Group: line[0], X: x}
		for i, f := range line[2:] {
			v := math.NaN()
			if f != "" {
				if v, err = strconv.ParseFloat(f, 64); err != nil {
					return nil, fmt.Errorf("line %d: %s: %w", n+2, s.Series[i], err)
				}
			}
			row.Values = append(row.Values, v)
		}
		s.Rows = append(s.Rows, row)
	}
	return s, nil
}

// WriteFiles writes <dir>/<base>.csv and <dir>/<base>.svg. The rows of an existing CSV with
// the same columns are kept unless s has a row of the same group and X, so that runs at
// different sizes, made one after the other, accumulate. An empty dir writes nothing.
func (s *Scaling) WriteFiles(dir, base, title string, out io.Writer) error {
	if dir == "" {
		return nil
	}
	merged := &Scaling{Group: s.Group, X: s.X, Series: s.Series}
	if f, err := os.Open(filepath.Join(dir, base+".csv")); err == nil {
		old, err := ReadScalingCSV(f)
		f.Close()
		if err == nil && slices.Equal(old.header(), s.header()) {
			merged.Rows = old.Rows
		} else {
			fmt.Fprintf(out, "%s.csv has other columns: replacing it\n", filepath.Join(dir, base))
		}
	}
	for _, r := range s.Rows {
		merged.Upsert(r)
	}
	return writePair(dir, base, merged.WriteCSV, func(w io.Writer) error { return merged.WriteSVG(w, title) },
		fmt.Sprintf(" (%d rows)", len(merged.Rows)), out)
}

// WriteSVG plots each series in a panel of its own against X, one line per group, X on a
// logarithmic axis when it spans a decade or more.
func (s *Scaling) WriteSVG(w io.Writer, title string) error {
	const (
		cols, pw, ph             = 3, 300, 190 // panels per row, plot area of a panel
		left, right, top, bottom = 58, 16, 34, 40
		cellW, cellH             = left + pw + right, top + ph + bottom
	)
	groups := s.groups()
	rows := (len(s.Series) + cols - 1) / cols
	width, height := cols*cellW, 56+rows*cellH
	xs := s.xRange()
	p := &errWriter{w: w}
	p.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	p.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p.printf(`<text x="10" y="20" font-size="15">%s</text>`+"\n", html.EscapeString(title))
	for gi, g := range groups {
		p.printf(`<circle cx="%d" cy="38" r="4" fill="%s"/><text x="%d" y="42">%s</text>`+"\n",
			14+gi*220, palette[gi%len(palette)], 22+gi*220, html.EscapeString(s.Group+" "+g))
	}
	for si, name := range s.Series {
		ox, oy := float64((si%cols)*cellW+left), float64(56+(si/cols)*cellH+top)
		// From 0 (or below, for a figure that came out negative, e.g. less than a baseline).
		ymin, ymax := 0.0, 0.0
		for _, r := range s.Rows {
			if si < len(r.Values) && !math.IsNaN(r.Values[si]) {
				ymin, ymax = min(ymin, r.Values[si]), max(ymax, r.Values[si])
			}
		}
		lo, hi := 0.0, niceCeil(ymax)
		if ymin < 0 {
			lo = -niceCeil(-ymin)
		}
		px := func(x float64) float64 { return ox + xs.pos(x)*pw }
		py := func(y float64) float64 { return oy + ph - (y-lo)/(hi-lo)*ph }
		p.printf(`<text x="%.1f" y="%.1f" font-size="12">%s</text>`+"\n", ox, oy-10, html.EscapeString(name))
		p.printf(`<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", ox, oy, pw, ph)
		for i := 0; i <= 4; i++ {
			y := lo + float64(i)/4*(hi-lo)
			p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				ox, py(y), ox+pw, py(y), ox-4, py(y)+4, fmtNum(y))
		}
		for _, x := range xs.ticks() {
			p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
				px(x), oy, px(x), oy+ph, px(x), oy+ph+14, fmtNum(x))
		}
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", ox+pw/2, oy+ph+30, html.EscapeString(s.X))
		for gi, g := range groups {
			c := palette[gi%len(palette)]
			var pts []string
			for _, r := range s.Rows {
				if r.Group != g || si >= len(r.Values) || math.IsNaN(r.Values[si]) {
					continue
				}
				x, y := px(r.X), py(r.Values[si])
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				p.printf(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s</title></circle>`+"\n", x, y, c,
					html.EscapeString(fmt.Sprintf("%s %s, %s %s: %s", s.Group, g, fmtNum(r.X), s.X, fmtNum(r.Values[si]))))
			}
			if len(pts) > 1 {
				p.printf(`<polyline points="%s" fill="none" stroke="%s"/>`+"\n", strings.Join(pts, " "), c)
			}
		}
	}
	p.printf("</svg>\n")
	return p.err
}

func (s *Scaling) groups() []string {
	var out []string
	for _, r := range s.Rows {
		if !slices.Contains(out, r.Group) {
			out = append(out, r.Group)
		}
	}
	return out
}

// axis maps X to [0,1], logarithmically when log is set.
type axis struct {
	lo, hi float64
	log    bool
}

func (s *Scaling) xRange() axis {
	a := axis{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, r := range s.Rows {
		a.lo, a.hi = min(a.lo, r.X), max(a.hi, r.X)
	}
	if len(s.Rows) == 0 {
		return axis{lo: 0, hi: 1}
	}
	if a.lo > 0 && a.hi/a.lo >= 10 {
		a.log = true
		a.lo, a.hi = math.Pow(10, math.Floor(math.Log10(a.lo))), math.Pow(10, math.Ceil(math.Log10(a.hi)))
		return a
	}
	a.lo, a.hi = 0, niceCeil(a.hi)
	return a
}

func (a axis) pos(x float64) float64 {
	if a.log {
		return (math.Log10(x) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (x - a.lo) / (a.hi - a.lo)
}

func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for x := a.lo; x <= a.hi*1.0001; x *= 10 {
			out = append(out, x)
		}
		return out
	}
	for i := 0; i <= 5; i++ {
		out = append(out, a.lo+float64(i)/5*(a.hi-a.lo))
	}
	return out
}

// fmtNum prints an axis or point value in at most four significant digits.
func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
