package framework

import "testing"

// A refusal is found by its message or its code, and a 403 inside a name or a number is not
// one: the VolumeAttachment csi-<hash> of a passing run once failed CheckNoForbidden.
func TestForbidden(t *testing.T) {
	for line, want := range map[string]bool{
		`persistentvolumes "pv-1" is forbidden: User "system:serviceaccount:default:x" cannot patch`: true,
		`"PATCH https://127.0.0.1:6443/api/v1/nodes/n" 403 Forbidden in 2 milliseconds`:              true,
		`response code=403`:                        true,
		`status 403`:                               true,
		`403: refused`:                             true,
		`attached csi-9b1e0c403c8f2a to node n`:    false,
		`uid 7c1d5403-0a2e-4b6f-9d40-3a403e1f0000`: false,
		`took 1.403s`:                              false,
		`size 14030`:                               false,
	} {
		if got := Forbidden.MatchString(line); got != want {
			t.Errorf("Forbidden.MatchString(%q) = %v, want %v", line, got, want)
		}
	}
}
