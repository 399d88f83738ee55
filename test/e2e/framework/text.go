package framework

import "strings"

// GrepLines returns the lines of s that contain sub, for a failure message that shows only
// what matters of a log or a /metrics page.
func GrepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
