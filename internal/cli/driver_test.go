package cli

import (
	"bytes"
	"strings"
	"testing"
)

// --capacity is a size the pool can count in int64: Value() made 1e30 a pool of 0 bytes and
// 9223372036854775808 a negative one.
func TestDriverCapacityFlag(t *testing.T) {
	for _, tc := range []struct{ capacity, want string }{
		{"0", "--capacity 0 is not a positive size"},
		{"-1Gi", "--capacity -1Gi is not a positive size"},
		{"1e30", "--capacity 1e30 exceeds the largest size"},
		{"9223372036854775808", "exceeds the largest size"},
		{"8Ei", "the value Kubernetes stores for 8Ei"},
		{"lots", `--capacity "lots"`},
	} {
		t.Run(tc.capacity, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Execute([]string{"driver", "--endpoint=unix:///tmp/x.sock", "--capacity=" + tc.capacity}, &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.want) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.want)
			}
		})
	}
}
