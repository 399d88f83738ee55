package nodeagent

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The kubelet's used > sizeLimit, for limits that Value() gets wrong.
func TestOverLimit(t *testing.T) {
	for _, tc := range []struct {
		used  int64
		limit string
		want  bool
	}{
		{4096, "1Mi", false},
		{2 << 20, "1Mi", true},
		{1 << 20, "1Mi", false},
		{2, "1.5", true}, // exact, as the kubelet's Cmp
		{1, "1.5", false},
		{1 << 40, "1e30", false},                // Value() is 0: every emptyDir was over
		{1 << 40, "9223372036854775808", false}, // Value() is negative
		{1 << 40, "8Ei", false},                 // capped to the int64 limit
		{1 << 40, "99999999999999999999Ei", false},
		{1 << 40, "1e10000000", false}, // and answered at once
		{1 << 40, "0", false},          // no limit
	} {
		if got := overLimit(tc.used, resource.MustParse(tc.limit)); got != tc.want {
			t.Errorf("overLimit(%d, %s) = %v, want %v", tc.used, tc.limit, got, tc.want)
		}
	}
}
