package sizes

import (
	"errors"
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		problem Problem
	}{
		{in: "1", want: 1},
		{in: "1Mi", want: 1 << 20},
		{in: "1.5Gi", want: 3 << 29},
		{in: "1.5", want: 2},   // rounded up, as Quantity.Value
		{in: "100m", want: 1},  // a tenth of a byte is still one byte
		{in: "1n", want: 1},    // the parser's smallest
		{in: "1e-30", want: 1}, // parsed as 1n
		{in: "1.0000000001", want: 2},
		{in: "1e18", want: 1e18},
		{in: "8E", want: 8e18},
		{in: "7Ei", want: 7 << 60},
		{in: "9223372036854775806", want: math.MaxInt64 - 1},
		{in: "9223372036854775806500m", problem: Capped}, // rounds up onto the cap
		{in: "0", problem: NotPositive},
		{in: "-1", problem: NotPositive},
		{in: "-8Ei", problem: NotPositive},
		{in: "9223372036854775807", problem: Capped},
		{in: "8Ei", problem: Capped},                    // the parser caps it
		{in: "99999999999999999999Ei", problem: Capped}, // likewise
		{in: "9223372036854775808", problem: TooLarge},  // Value() wraps this to math.MinInt64
		{in: "123456789012345678901234567890", problem: TooLarge},
		{in: "1e30", problem: TooLarge}, // Value() says 0
		{in: "9.3e18", problem: TooLarge},
		{in: "1e10000000", problem: TooLarge}, // Cmp would take seconds
		{in: "1e9999999999", problem: TooLarge},
	} {
		q := resource.MustParse(tc.in)
		got, err := Bytes("requested storage", q)
		if tc.problem == 0 {
			if err != nil || got != tc.want {
				t.Errorf("%s: got %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		var re *RangeError
		if !errors.As(err, &re) || re.Problem != tc.problem || got != 0 {
			t.Errorf("%s: got %d, %v; want problem %d", tc.in, got, err, tc.problem)
		}
	}
}

func TestBytesMessage(t *testing.T) {
	_, err := Bytes("requested storage", resource.MustParse("8Ei"))
	for _, want := range []string{"requested storage 9223372036854775807", "8Ei", "the largest size a CSI volume can have (9223372036854775807 bytes)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("8Ei: error %v does not say %q", err, want)
		}
	}
	_, err = Bytes("requested storage", resource.MustParse("1e30"))
	if want := "requested storage 1e30 exceeds the largest size a CSI volume can have (9223372036854775807 bytes)"; err == nil || err.Error() != want {
		t.Errorf("1e30: got %v, want %q", err, want)
	}
	_, err = Bytes("sizeLimit", resource.MustParse(strings.Repeat("9", 5000)))
	if err == nil || len(err.Error()) > 200 {
		t.Errorf("a long quantity is repeated in full: %.300v", err)
	}
}

// Parse refuses, at once, the exponents the quantity parser would spend minutes on.
func TestParseRefusesHugeExponents(t *testing.T) {
	for _, s := range []string{"1e1000000000000", "1e-999999", "5E12345"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
	for _, s := range []string{"1e30", "1Gi", "1e-30", "8Ei"} {
		if _, err := Parse(s); err != nil {
			t.Errorf("Parse(%q): %v", s, err)
		}
	}
}
