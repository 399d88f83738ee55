// Command table prints the side-by-side result table of `make conformance` from the JUnit
// reports of ginkgo runs: one line per spec with its result in each row (kubevol, upstream),
// then one totals line per row, "kubevol: N passed, N failed, N skipped in Ts".
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
	Name    string    `xml:"name,attr"`
	Time    float64   `xml:"time,attr"`
	Skipped *struct{} `xml:"skipped"`
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

func main() {
	var rows, secs pairs
	flag.Var(&rows, "row", "name=junit.xml, one per row, in column order")
	flag.Var(&secs, "seconds", "name=N: the run time of a row")
	flag.Parse()
	results := map[string]map[string]string{} // spec -> row -> result
	var names []string
	seconds := map[string]string{}
	for _, s := range secs {
		n, v, _ := strings.Cut(s, "=")
		seconds[n] = v
	}
	type total struct{ passed, failed, skipped int }
	totals := map[string]*total{}
	for _, r := range rows {
		name, file, ok := strings.Cut(r, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "-row %q: want name=file\n", r)
			os.Exit(2)
		}
		names = append(names, name)
		totals[name] = &total{}
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var rep report
		if err := xml.Unmarshal(data, &rep); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			os.Exit(1)
		}
		for _, s := range rep.Suites {
			for _, c := range s.Cases {
				if !strings.Contains(c.Name, "External Storage") {
					continue // the suite's own setup and teardown nodes
				}
				res := "passed"
				switch {
				case c.Skipped != nil:
					res = "skipped"
					totals[name].skipped++
				case c.Failure != nil || c.Error != nil:
					res = "FAILED"
					totals[name].failed++
				default:
					totals[name].passed++
				}
				if res != "skipped" {
					res += fmt.Sprintf(" (%.1fs)", c.Time)
				}
				if results[c.Name] == nil {
					results[c.Name] = map[string]string{}
				}
				results[c.Name][name] = res
			}
		}
	}
	specs := make([]string, 0, len(results))
	for s := range results {
		specs = append(specs, s)
	}
	sort.Strings(specs)
	fmt.Printf("| spec | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	for _, s := range specs {
		cells := make([]string, len(names))
		for i, n := range names {
			cells[i] = results[s][n]
			if cells[i] == "" {
				cells[i] = "not run"
			}
		}
		fmt.Printf("| %s | %s |\n", strings.ReplaceAll(s, "|", "\\|"), strings.Join(cells, " | "))
	}
	fmt.Println()
	for _, n := range names {
		t := totals[n]
		fmt.Printf("%s: %d passed, %d failed, %d skipped in %ss\n\n", n, t.passed, t.failed, t.skipped, seconds[n])
	}
}
