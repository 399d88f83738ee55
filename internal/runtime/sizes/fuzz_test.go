package sizes

import (
	"errors"
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// FuzzBytes checks Bytes against the quantity it converts: never negative, never less than
// the quantity and less than one byte more when it succeeds, and an error exactly when the
// quantity is not positive or not below Limit. Fuzz longer with
//
//	go test -run '^$' -fuzz '^FuzzBytes$' -fuzztime 10m ./internal/runtime/sizes/
func FuzzBytes(f *testing.F) {
	for _, s := range []string{
		"1", "1Mi", "1.5Gi", "1.5", "100m", "1n", "1e-30", "0", "-1", "7Ei", "8Ei", "16Ei",
		"99999999999999999999Ei", "9223372036854775806", "9223372036854775807",
		"9223372036854775808", "9223372036854775806500m", "1e18", "9.3e18", "1e30", "1e10000000",
		"123456789012345678901234567890", "0.000000001", "8E", "9.223372036854775807E", "1e-9",
	} {
		f.Add(s)
	}
	one := resource.MustParse("1")
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Parse(s) // refuses the exponents the parser itself hangs on

		if err != nil {
			return
		}
		got, err := Bytes("q", q)
		if got < 0 {
			t.Fatalf("%q: negative %d", s, got)
		}
		// The oracle needs exact comparisons, which cost 10^|scale|: only for sane scales.
		scale := q.AsDec().Scale()
		if scale < -40 {
			if err == nil {
				t.Fatalf("%q (scale %d) converts to %d", s, scale, got)
			}
			return
		}
		representable := q.Sign() > 0 && q.CmpInt64(math.MaxInt64) < 0
		if err != nil {
			var re *RangeError
			if !errors.As(err, &re) {
				t.Fatalf("%q: not a RangeError: %v", s, err)
			}
			// The only representable quantities refused are those that round up onto Limit.
			if representable && q.CmpInt64(math.MaxInt64-1) <= 0 {
				t.Fatalf("%q is representable but refused: %v", s, err)
			}
			return
		}
		if !representable {
			t.Fatalf("%q is not representable but converts to %d", s, got)
		}
		b := *resource.NewQuantity(got, resource.BinarySI)
		if q.Cmp(b) > 0 {
			t.Fatalf("%q converts to %d, less than asked", s, got)
		}
		b.Sub(one)
		if q.Cmp(b) <= 0 {
			t.Fatalf("%q converts to %d, a byte or more beyond what was asked", s, got)
		}
		// The canonical form the API server stores converts the same.
		if again, err := Bytes("q", resource.MustParse(q.String())); err != nil || again != got {
			t.Fatalf("%q: canonical %q converts to %d, %v; want %d", s, q.String(), again, err, got)
		}
	})
}
