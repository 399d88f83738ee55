package report

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFiles writes <dir>/<base>.csv and <dir>/<base>.svg (the latency-over-time plot titled
// title) and names them on out. An empty dir writes nothing.
func (r *Run) WriteFiles(dir, base, title string, out io.Writer) error {
	if dir == "" {
		return nil
	}
	return writePair(dir, base, r.WriteCSV, func(w io.Writer) error { return r.WriteSVG(w, title) }, "", out)
}

// writePair writes <dir>/<base>.csv and <dir>/<base>.svg with csv and svg, and names each
// on out, followed by note.
func writePair(dir, base string, csv, svg func(io.Writer) error, note string, out io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".csv", csv}, {".svg", svg}} {
		path := filepath.Join(dir, base+f.ext)
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := errors.Join(f.write(fh), fh.Close()); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s%s\n", path, note)
	}
	return nil
}
