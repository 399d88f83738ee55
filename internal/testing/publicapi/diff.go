package publicapi

import "strings"

// lineDiff lists the lines only in a ("-") and only in b ("+"), in order; both are sorted
// sets of lines, so this is their whole difference. It is "" when they are equal.
func lineDiff(a, b string) string {
	x, y := strings.Split(strings.TrimSuffix(a, "\n"), "\n"), strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case j == len(y) || (i < len(x) && x[i] < y[j]):
			out.WriteString("- " + x[i] + "\n")
			i++
		case i == len(x) || y[j] < x[i]:
			out.WriteString("+ " + y[j] + "\n")
			j++
		default:
			i++
			j++
		}
	}
	return out.String()
}
