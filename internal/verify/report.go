package verify

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints one row per case: case, result, time, and the reason or the event or
// CSI error that explains a failure.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tTIME\tDETAIL")
	var passed, failed, na int
	for _, res := range r.Results {
		switch res.Outcome {
		case Passed:
			passed++
		case Failed:
			failed++
		default:
			na++
		}
		lines := strings.Split(res.Detail, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", res.Name, res.Outcome, seconds(res.Duration), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(tw, "\t\t\t  %s\n", l)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "driver %s: %d passed, %d failed, %d not applicable in %s\n", r.Driver, passed, failed, na, seconds(r.Duration))
	return err
}

func seconds(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// JUnit XML as CI systems read it: one testsuite, a testcase per case, failures with the
// detail, not-applicable cases as skipped with their reason.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML to path.
func (r *Report) WriteJUnit(path string) error {
	s := junitSuite{Name: "kubevol verify " + r.Driver, Time: r.Duration.Seconds()}
	for _, res := range r.Results {
		c := junitCase{Name: res.Name, Classname: "kubevol.verify." + r.Driver, Time: res.Duration.Seconds()}
		switch res.Outcome {
		case Failed:
			s.Failures++
			c.Failure = &junitMessage{Message: firstLine(res.Detail), Body: res.Detail}
		case NotApplicable:
			s.Skipped++
			c.Skipped = &junitMessage{Message: "not applicable: " + res.Detail}
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	out, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(out, '\n')...), 0o644)
}
