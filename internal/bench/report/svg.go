package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"time"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// WriteSVG plots every series as dots of latency (y) against the sample's start time (x),
// with the title and axis labels, in a self-contained SVG that any browser opens.
func (r *Run) WriteSVG(w io.Writer, title string) error {
	const (
		width, height            = 900, 500
		left, right, top, bottom = 70, 20, 40, 50
	)
	var maxX, maxY time.Duration
	for _, s := range r.Samples {
		maxX = max(maxX, s.Start)
		for _, v := range s.Values {
			maxY = max(maxY, v)
		}
	}
	xr, yr := niceCeil(maxX.Seconds()), niceCeil(maxY.Seconds())
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	x := func(d time.Duration) float64 { return left + d.Seconds()/xr*pw }
	y := func(d time.Duration) float64 { return top + ph - d.Seconds()/yr*ph }

	p := &errWriter{w: w}
	p.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	p.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p.printf(`<text x="%d" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	for i := 0; i <= 5; i++ {
		fx, fy := float64(i)/5*xr, float64(i)/5*yr
		px := left + float64(i)/5*pw
		py := top + ph - float64(i)/5*ph
		p.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px, top, px, top+ph)
		p.printf(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, py, left+pw, py)
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, top+ph+16, fmtSec(fx))
		p.printf(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py+4, fmtSec(fy))
	}
	p.printf(`<text x="%.1f" y="%d" text-anchor="middle">time since start of run (s)</text>`+"\n", left+pw/2, height-10)
	p.printf(`<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">latency (s)</text>`+"\n", top+ph/2)
	for i, name := range r.Series {
		c := palette[i%len(palette)]
		for _, s := range r.Samples {
			if i < len(s.Values) && s.Values[i] >= 0 {
				p.printf(`<circle cx="%.1f" cy="%.1f" r="1.8" fill="%s" fill-opacity="0.6"/>`+"\n", x(s.Start), y(s.Values[i]), c)
			}
		}
		ly := top + 14 + i*16
		p.printf(`<circle cx="%.1f" cy="%d" r="4" fill="%s"/><text x="%.1f" y="%d">%s</text>`+"\n",
			left+pw-150, ly-4, c, left+pw-140, ly, html.EscapeString(name))
	}
	p.printf("</svg>\n")
	return p.err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so the axis ticks are readable.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*exp >= v {
			return m * exp
		}
	}
	return 10 * exp
}

func fmtSec(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
