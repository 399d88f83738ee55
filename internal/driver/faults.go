package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FaultsEnv holds fault rules in the same syntax as the --fault flag, for tests that start
// `kubevol driver` through another component.
const FaultsEnv = "KUBEVOL_DRIVER_FAULTS"

// FaultRule injects failures into the RPCs it matches, for the reliability tests of the
// components that call the driver. Several rules may match one call; all apply.
type FaultRule struct {
	// Method is a CSI method name such as "CreateVolume", or "*" for all.
	Method string
	// Code, if not OK, is returned instead of running the call, with probability Rate.
	Code codes.Code
	Rate float64
	// Count, if positive, limits the rule to the first Count matching calls.
	Count int
	// Delay is added before the call runs.
	Delay time.Duration
	// Hang blocks the call until its client gives up (or the driver stops).
	Hang bool
}

// ParseFaults parses rules separated by ";". A rule is METHOD:key=value,... with keys
// error=CODE (a gRPC code name such as UNAVAILABLE, or its number), rate=0..1 (default 1),
// count=N, delay=DURATION and hang. Example:
//
//	CreateVolume:error=RESOURCE_EXHAUSTED,rate=0.5;NodeStageVolume:delay=2s;DeleteVolume:hang
func ParseFaults(spec string) ([]FaultRule, error) {
	var rules []FaultRule
	for _, raw := range strings.Split(spec, ";") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		method, opts, ok := strings.Cut(raw, ":")
		if !ok || method == "" || opts == "" {
			return nil, fmt.Errorf("fault %q: want METHOD:key=value[,key=value]", raw)
		}
		r := FaultRule{Method: method, Rate: 1}
		for _, kv := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			var err error
			switch k {
			case "error":
				r.Code, err = parseCode(v)
			case "rate":
				r.Rate, err = strconv.ParseFloat(v, 64)
				if err == nil && (r.Rate < 0 || r.Rate > 1) {
					err = fmt.Errorf("rate %v not in [0,1]", r.Rate)
				}
			case "count":
				r.Count, err = strconv.Atoi(v)
				if err == nil && r.Count < 0 {
					err = fmt.Errorf("negative count")
				}
			case "delay":
				r.Delay, err = time.ParseDuration(v)
				if err == nil && r.Delay < 0 {
					err = fmt.Errorf("negative delay")
				}
			case "hang":
				r.Hang = v == "" || v == "true"
				if v != "" && v != "true" && v != "false" {
					err = fmt.Errorf("hang takes no value or true/false")
				}
			default:
				err = fmt.Errorf("unknown key %q (want error, rate, count, delay or hang)", k)
			}
			if err != nil {
				return nil, fmt.Errorf("fault %q: %v", raw, err)
			}
		}
		if r.Code == codes.OK && r.Delay == 0 && !r.Hang {
			return nil, fmt.Errorf("fault %q: sets neither error, delay nor hang", raw)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseCode(s string) (codes.Code, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n <= 16 {
		return codes.Code(n), nil
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(s)))); err == nil && c != codes.OK {
		return c, nil
	}
	for c := codes.Code(1); c <= 16; c++ {
		if strings.EqualFold(c.String(), s) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("error %q: want a gRPC code name such as UNAVAILABLE", s)
}

// String renders a rule in the syntax ParseFaults reads, for the startup log.
func (r FaultRule) String() string {
	var parts []string
	if r.Code != codes.OK {
		parts = append(parts, "error="+r.Code.String(), "rate="+strconv.FormatFloat(r.Rate, 'g', -1, 64))
	}
	if r.Count > 0 {
		parts = append(parts, "count="+strconv.Itoa(r.Count))
	}
	if r.Delay > 0 {
		parts = append(parts, "delay="+r.Delay.String())
	}
	if r.Hang {
		parts = append(parts, "hang")
	}
	return r.Method + ":" + strings.Join(parts, ",")
}

// faults applies rules to calls. Each rule counts its own matches.
type faults struct {
	rules []FaultRule
	mu    sync.Mutex
	seen  []int
	rand  func() float64
}

func newFaults(rules []FaultRule) *faults {
	return &faults{rules: rules, seen: make([]int, len(rules)), rand: rand.Float64}
}

// apply runs the rules for method and returns the injected error, if any. stop ends a hang
// when the driver shuts down.
func (f *faults) apply(ctx context.Context, method string, stop <-chan struct{}) error {
	if f == nil || len(f.rules) == 0 {
		return nil
	}
	for i, r := range f.rules {
		if r.Method != "*" && r.Method != method {
			continue
		}
		f.mu.Lock()
		f.seen[i]++
		active := r.Count == 0 || f.seen[i] <= r.Count
		fire := active && r.Code != codes.OK && f.rand() < r.Rate
		f.mu.Unlock()
		if !active {
			continue
		}
		if r.Delay > 0 {
			select {
			case <-time.After(r.Delay):
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		if r.Hang {
			select {
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			case <-stop:
				return status.Error(codes.Unavailable, "driver is shutting down")
			}
		}
		if fire {
			return status.Errorf(r.Code, "injected fault for %s", method)
		}
	}
	return nil
}
