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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{
		{".csv", r.WriteCSV},
		{".svg", func(w io.Writer) error { return r.WriteSVG(w, title) }},
	} {
		path := filepath.Join(dir, base+f.ext)
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := errors.Join(f.write(fh), fh.Close()); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", path)
	}
	return nil
}
