package report

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress is a one-line terminal progress bar. It redraws at most every 200 ms, so a
// benchmark can call Set on every completion without paying for the terminal.
type Progress struct {
	w     io.Writer
	label string
	total int
	start time.Time

	mu    sync.Mutex
	done  int
	drawn time.Time
}

// NewProgress returns a bar for total steps; it draws nothing until the first Set.
func NewProgress(w io.Writer, label string, total int) *Progress {
	return &Progress{w: w, label: label, total: total, start: time.Now()}
}

// Set records that done steps have completed.
func (p *Progress) Set(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	if now := time.Now(); now.Sub(p.drawn) >= 200*time.Millisecond || done >= p.total {
		p.drawn = now
		p.draw()
	}
}

// Finish draws the final state and ends the line.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *Progress) draw() {
	const width = 30
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	if frac > 1 {
		frac = 1
	}
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r%-12s [%s%s] %d/%d %5.1f%% %s", p.label,
		strings.Repeat("=", n), strings.Repeat(" ", width-n),
		p.done, p.total, 100*frac, time.Since(p.start).Round(100*time.Millisecond))
}
