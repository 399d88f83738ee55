package report

import (
	"encoding/csv"
	"io"
	"strconv"
	"time"
)

// WriteCSV writes one row per sample: name, start_seconds, then one column per series in
// seconds (empty when the phase did not complete).
func (r *Run) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	header := append([]string{"name", "start_seconds"}, suffix(r.Series, "_seconds")...)
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, s := range r.Samples {
		row := []string{s.Name, seconds(s.Start)}
		for i := range r.Series {
			v := ""
			if i < len(s.Values) && s.Values[i] >= 0 {
				v = seconds(s.Values[i])
			}
			row = append(row, v)
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 6, 64) }

func suffix(names []string, s string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + s
	}
	return out
}
