// Package sizes converts Kubernetes quantities to the whole bytes that CSI carries, with
// every way that can go wrong turned into an error instead of a wrapped or saturated int64.
//
// resource.Quantity.Value() is not safe for sizes: it wraps values beyond int64 (a claim of
// 9223372036854775808 reads as -9223372036854775808, one of 123456789012345678901234567890
// as a negative number), returns 0 for large decimal exponents (1e30), and the quantity
// parser caps every binary or decimal-suffixed value beyond int64 (8Ei, 16Ei,
// 99999999999999999999Ei) to exactly math.MaxInt64, so that value no longer says what was
// asked for. Comparing such a quantity with Cmp is also unsafe: a quantity such as 1e10000000
// parses in microseconds but compares in seconds.
package sizes

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Limit is the largest size a CSI message can carry (its sizes are int64). Kubernetes
// stores every larger binary or suffixed quantity as exactly this value, so a quantity
// equal to it is refused too: it may stand for 8Ei or far more.
const Limit = math.MaxInt64

// maxQuoted is how much of a quantity's text an error repeats.
const maxQuoted = 40

// Problem says why a quantity has no byte count.
type Problem int

const (
	// NotPositive: zero or negative.
	NotPositive Problem = iota + 1
	// TooLarge: beyond Limit.
	TooLarge
	// Capped: exactly Limit, the value Kubernetes stores for 8Ei and anything larger.
	Capped
)

// RangeError is a quantity that is not a size in bytes that CSI can carry.
type RangeError struct {
	// What names the quantity in the message, e.g. "requested storage".
	What     string
	Quantity string
	Problem  Problem
}

func (e *RangeError) Error() string {
	switch e.Problem {
	case NotPositive:
		return fmt.Sprintf("%s %s is not a positive size", e.What, e.Quantity)
	case Capped:
		return fmt.Sprintf("%s %s (the value Kubernetes stores for 8Ei and every larger quantity) reaches or exceeds the largest size a CSI volume can have (%d bytes)", e.What, e.Quantity, int64(Limit))
	default:
		return fmt.Sprintf("%s %s exceeds the largest size a CSI volume can have (%d bytes)", e.What, e.Quantity, int64(Limit))
	}
}

// Bytes returns q as whole bytes, a fraction rounded up as Quantity.Value rounds it (so
// "1.5" is 2 bytes and a claim never gets less than it asked for). A quantity that is not
// positive, or not below Limit, is a *RangeError naming it as what. The cost is bounded by
// the length of q's digits, whatever its exponent.
func Bytes(what string, q resource.Quantity) (int64, error) {
	fail := func(p Problem) (int64, error) {
		s := q.String()
		if len(s) > maxQuoted {
			s = s[:maxQuoted] + "..." // events and log lines stay readable
		}
		return 0, &RangeError{What: what, Quantity: s, Problem: p}
	}
	if q.Sign() <= 0 {
		return fail(NotPositive)
	}
	// value = unscaled × 10^-scale. AsDec may return q's own inf.Dec: it is only read.
	d := q.AsDec()
	unscaled, scale := d.UnscaledBig(), int64(d.Scale())
	var n *big.Int
	switch {
	case scale <= -19:
		// unscaled ≥ 1, so the value is at least 10^19 > Limit.
		return fail(TooLarge)
	case scale <= 0:
		n = new(big.Int).Mul(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil))
	case 3*scale >= int64(unscaled.BitLen()):
		// unscaled < 2^BitLen ≤ 8^scale < 10^scale: a positive fraction of one byte.
		n = big.NewInt(1)
	default:
		// 10^scale is no longer than unscaled here, so this is cheap.
		var rem big.Int
		n, _ = new(big.Int).QuoRem(unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil), &rem)
		if rem.Sign() != 0 {
			n.Add(n, big.NewInt(1))
		}
	}
	switch {
	case !n.IsInt64():
		return fail(TooLarge)
	case n.Int64() == Limit:
		return fail(Capped)
	}
	return n.Int64(), nil
}

// exponent is the decimal exponent at the end of a quantity's text.
var exponent = regexp.MustCompile(`[eE][+-]?([0-9]+)\s*$`)

// Parse is resource.ParseQuantity for text that a manifest controls and no API server has
// validated (an inline volume's attributes, a flag): an exponent of more than four digits
// is refused before the parser sees it, because the parser wraps one beyond int32 into a
// scale it then spends minutes rounding (1e1000000000000), and takes seconds on 1e-999999.
// No size needs such an exponent.
func Parse(s string) (resource.Quantity, error) {
	if m := exponent.FindStringSubmatch(s); m != nil && len(strings.TrimLeft(m[1], "0")) > 4 {
		return resource.Quantity{}, fmt.Errorf("quantity %.40q: exponent too large", s)
	}
	return resource.ParseQuantity(s)
}
