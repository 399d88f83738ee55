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
	"k8s.io/klog/v2"
)

// FaultsEnv holds fault rules in the same syntax as the --fault flag, for tests that start
// `kubevol driver` through another component.
const FaultsEnv = "KUBEVOL_DRIVER_FAULTS"

// FaultRule injects failures into the RPCs it matches, for the reliability tests of the
// components that call the driver. Several rules may match one call; all apply.
type FaultRule struct {
	// Method is a CSI method name such as "CreateVolume", or "*" for all.
	Method string
	// Code, if not OK, is returned instead of running the call (with Lose: after it ran).
	Code codes.Code
	// Rate is the probability that Code, Hang or Lose fires for a matching call.
	Rate float64
	// Count, if positive, limits the rule to the first Count matching calls.
	Count int
	// Delay is added before every matching call runs, whatever Rate says.
	Delay time.Duration
	// Hang blocks the call until its client gives up (or the driver stops).
	Hang bool
	// Lose runs the call, so that it takes effect, and then loses its reply: the reply is
	// held until the client gives up, so that the client sees its own DEADLINE_EXCEEDED as
	// when a reply is lost on the wire; with Code, the client gets Code at once instead, as
	// when the connection breaks after the call ran (UNAVAILABLE).
	Lose bool
	// Clear is a request field (a dotted path of CSI field names, such as
	// volume_capability.mount.mount_flags) cleared before every matching call runs: a
	// driver that ignores it, for tests of what checks it.
	Clear string
	// Shadow, for NodePublishVolume, mounts a fresh small tmpfs over the target path once
	// the call succeeded: a driver that publishes something other than the volume, so that
	// what a pod writes is not kept, for tests of what checks the data.
	Shadow bool
}

// ParseFaults parses rules separated by ";". A rule is METHOD:key=value,... with keys
// error=CODE (a gRPC code name such as UNAVAILABLE, or its number), rate=0..1 (default 1;
// the probability of error, hang and lose), count=N, delay=DURATION (every matching call),
// hang, and lose (the call runs and takes effect, then its reply is lost: held until the
// client's deadline, or replaced at once by error=CODE if given). Example:
//
//	CreateVolume:error=RESOURCE_EXHAUSTED,rate=0.5;NodeStageVolume:delay=2s;DeleteVolume:hang
//	CreateVolume:lose,rate=0.2;NodePublishVolume:lose,error=UNAVAILABLE,rate=0.1
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
				r.Hang, err = parseFlag(k, v)
			case "lose":
				r.Lose, err = parseFlag(k, v)
			case "clear":
				r.Clear, err = v, checkFieldPath(v)
			case "shadow":
				r.Shadow, err = parseFlag(k, v)
				if err == nil && method != "NodePublishVolume" {
					err = fmt.Errorf("shadow is for NodePublishVolume")
				}
			default:
				err = fmt.Errorf("unknown key %q (want error, rate, count, delay, hang, lose, clear or shadow)", k)
			}
			if err != nil {
				return nil, fmt.Errorf("fault %q: %v", raw, err)
			}
		}
		if r.Code == codes.OK && r.Delay == 0 && !r.Hang && !r.Lose && r.Clear == "" && !r.Shadow {
			return nil, fmt.Errorf("fault %q: sets neither error, delay, hang, lose, clear nor shadow", raw)
		}
		if r.Hang && r.Lose {
			return nil, fmt.Errorf("fault %q: hang keeps the call from running, lose needs it to run", raw)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseFlag(key, v string) (bool, error) {
	switch v {
	case "", "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%s takes no value or true/false", key)
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
		parts = append(parts, "error="+r.Code.String())
	}
	if r.Code != codes.OK || ((r.Hang || r.Lose) && r.Rate != 1) {
		parts = append(parts, "rate="+strconv.FormatFloat(r.Rate, 'g', -1, 64))
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
	if r.Lose {
		parts = append(parts, "lose")
	}
	if r.Clear != "" {
		parts = append(parts, "clear="+r.Clear)
	}
	if r.Shadow {
		parts = append(parts, "shadow")
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

// run applies the rules for method around call, which runs the handler: the injected
// error, delay or hang come before it, a lost reply after it. stop ends a hang or a held
// reply when the driver shuts down.
func (f *faults) run(ctx context.Context, method string, stop <-chan struct{}, call func() (any, error)) (any, error) {
	if f == nil || len(f.rules) == 0 {
		return call()
	}
	lose, err := f.apply(ctx, method, stop)
	if err != nil {
		klog.FromContext(ctx).Info("Injected fault", "code", status.Code(err))
		return nil, err
	}
	resp, err := call()
	if lose == nil {
		return resp, err
	}
	// The call took effect (or failed) for good; only its client is left not knowing.
	klog.FromContext(ctx).Info("Injected fault: reply lost", "code", status.Code(err), "clientCode", lose.Code)
	if lose.Code != codes.OK {
		return nil, status.Errorf(lose.Code, "injected fault: the reply of %s was lost", method)
	}
	select {
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-stop:
		return nil, status.Error(codes.Unavailable, "driver is shutting down")
	}
}

// apply runs the rules for method that act before the call and returns the injected error,
// if any, and the first rule that loses the call's reply, if one fired.
func (f *faults) apply(ctx context.Context, method string, stop <-chan struct{}) (lose *FaultRule, err error) {
	if f == nil || len(f.rules) == 0 {
		return nil, nil
	}
	for i, r := range f.rules {
		if r.Method != "*" && r.Method != method {
			continue
		}
		f.mu.Lock()
		f.seen[i]++
		active := r.Count == 0 || f.seen[i] <= r.Count
		fire := active && (r.Code != codes.OK || r.Hang || r.Lose) && f.rand() < r.Rate
		f.mu.Unlock()
		if !active {
			continue
		}
		if r.Delay > 0 {
			select {
			case <-time.After(r.Delay):
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		if !fire {
			continue
		}
		switch {
		case r.Lose:
			if lose == nil {
				lose = &f.rules[i]
			}
		case r.Hang:
			select {
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			case <-stop:
				return nil, status.Error(codes.Unavailable, "driver is shutting down")
			}
		default:
			return nil, status.Errorf(r.Code, "injected fault for %s", method)
		}
	}
	return lose, nil
}
