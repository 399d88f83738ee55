// Command table prints the side-by-side result table of `make conformance` from the JUnit
// reports of ginkgo runs: one line per spec with its result and run time in each row
// (kubevol, upstream, kubevol-vm, as many as given), then one totals line per row,
// "kubevol: N passed, N failed, N skipped in Ts", and one per definition of the row,
// "kubevol dir: N passed, ...". A row may be several runs, one per definition, each naming
// its specs with its label. A spec the run's focus and skip left out is not in the table;
// one the suite skipped as it ran (a capability the driver does not claim) is.
package main

import (
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

type testcase struct {
	Name    string  `xml:"name,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct{} `xml:"failure"`
	Error   *struct{} `xml:"error"`
}

type report struct {
	Suites []struct {
		Cases []testcase `xml:"testcase"`
	} `xml:"testsuite"`
}

type pairs []string

func (p *pairs) String() string     { return strings.Join(*p, ",") }
func (p *pairs) Set(v string) error { *p = append(*p, v); return nil }

type cell struct {
	result string
	secs   float64
}

type total struct{ passed, failed, skipped int }

func main() {
	var rows, secs pairs
	flag.Var(&rows, "row", "name=[label:]junit.xml[,[label:]junit.xml...], one per row, in column order; a label names the driver definition of that run")
	flag.Var(&secs, "seconds", "name=N: the run time of a row; name:label=N: of one of its runs")
	flag.Parse()
	results := map[string]map[string]cell{} // spec -> row -> result
	var names []string
	seconds := map[string]string{}
	for _, s := range secs {
		n, v, _ := strings.Cut(s, "=")
		seconds[n] = v
	}
	totals := map[string]*total{} // row, and row:label, -> its counts
	labels := map[string][]string{}
	for _, r := range rows {
		name, files, ok := strings.Cut(r, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "-row %q: want name=file\n", r)
			os.Exit(2)
		}
		names = append(names, name)
		totals[name] = &total{}
		for _, f := range strings.Split(files, ",") {
			label, file, ok := strings.Cut(f, ":")
			if !ok {
				label, file = "", f
			}
			cases, err := readCases(file)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			run := &total{}
			if label != "" {
				labels[name] = append(labels[name], label)
				totals[name+":"+label] = run
			}
			for _, c := range cases {
				spec := c.Name
				if label != "" {
					spec = label + ": " + spec
				}
				if results[spec] == nil {
					results[spec] = map[string]cell{}
				}
				results[spec][name] = classify(c, totals[name], run)
			}
		}
	}
	specs := make([]string, 0, len(results))
	for s := range results {
		specs = append(specs, s)
	}
	sort.Strings(specs)
	fmt.Print("| spec |")
	for _, n := range names {
		fmt.Printf(" %s | %s time |", n, n)
	}
	fmt.Printf("\n|---|%s\n", strings.Repeat("---|---|", len(names)))
	for _, s := range specs {
		fmt.Printf("| %s |", strings.ReplaceAll(s, "|", "\\|"))
		for _, n := range names {
			c, ok := results[s][n]
			switch {
			case !ok:
				fmt.Print(" not run | |")
			case c.result == "skipped":
				fmt.Print(" skipped | |")
			default:
				fmt.Printf(" %s | %.1fs |", c.result, c.secs)
			}
		}
		fmt.Println()
	}
	fmt.Println()
	for _, n := range names {
		t := totals[n]
		fmt.Printf("%s: %d passed, %d failed, %d skipped in %ss\n\n", n, t.passed, t.failed, t.skipped, seconds[n])
		if len(labels[n]) < 2 {
			continue
		}
		for _, l := range labels[n] {
			t := totals[n+":"+l]
			fmt.Printf("- %s %s: %d passed, %d failed, %d skipped in %ss\n", n, l, t.passed, t.failed, t.skipped, seconds[n+":"+l])
		}
		fmt.Println()
	}
}

// readCases are the spec cases of a JUnit report that the run's focus and skip chose: its
// It nodes, without the suite's own setup and teardown nodes, and without the specs the
// filters left out (e2e.test holds every spec of the packages it imports, and the report
// names each, skipped with the bare message "skipped"; a spec that skips itself as it runs
// gives its reason: "skipped - Driver ... doesn't support ...").
func readCases(file string) ([]testcase, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var rep report
	if err := xml.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	var out []testcase
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			if !strings.HasPrefix(c.Name, "[It] ") || c.Skipped != nil && c.Skipped.Message == "skipped" {
				continue
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// classify is a case's result, counted in each of ts.
func classify(c testcase, ts ...*total) cell {
	var r cell
	switch {
	case c.Skipped != nil:
		r = cell{result: "skipped"}
	case c.Failure != nil || c.Error != nil:
		r = cell{result: "FAILED", secs: c.Time}
	default:
		r = cell{result: "passed", secs: c.Time}
	}
	for _, t := range ts {
		switch r.result {
		case "skipped":
			t.skipped++
		case "FAILED":
			t.failed++
		default:
			t.passed++
		}
	}
	return r
}
