package driver

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFaultsLose checks that a lost reply comes after the call ran: the handler's effect
// happens, and the client sees its own deadline, or the rule's code at once.
func TestFaultsLose(t *testing.T) {
	ran := 0
	call := func() (any, error) { ran++; return "reply", nil }

	held := newFaults([]FaultRule{{Method: "CreateVolume", Rate: 1, Lose: true, Count: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	resp, err := held.run(ctx, "CreateVolume", nil, call)
	if ran != 1 || resp != nil || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("held reply: ran %d times, got %v %v; want one run and DEADLINE_EXCEEDED", ran, resp, err)
	}
	// count=1: the next call's reply arrives.
	if resp, err := held.run(context.Background(), "CreateVolume", nil, call); ran != 2 || resp != "reply" || err != nil {
		t.Errorf("second call: ran %d times, got %v %v", ran, resp, err)
	}

	broken := newFaults([]FaultRule{{Method: "*", Rate: 1, Lose: true, Code: codes.Unavailable}})
	if resp, err := broken.run(context.Background(), "NodeStageVolume", nil, call); ran != 3 || resp != nil || status.Code(err) != codes.Unavailable {
		t.Errorf("lose with a code: ran %d times, got %v %v; want one more run and UNAVAILABLE", ran, resp, err)
	}

	stop := make(chan struct{})
	close(stop)
	if _, err := held.run(context.Background(), "CreateVolume", stop, call); err != nil {
		t.Errorf("after count, a stopping driver still answers: %v", err)
	}
	shutting := newFaults([]FaultRule{{Method: "*", Rate: 1, Lose: true}})
	if _, err := shutting.run(context.Background(), "DeleteVolume", stop, call); status.Code(err) != codes.Unavailable {
		t.Errorf("held reply of a stopping driver: %v, want UNAVAILABLE", err)
	}

	// An error before the call keeps it from running: nothing to lose.
	both := newFaults([]FaultRule{{Method: "*", Rate: 1, Code: codes.Unavailable}, {Method: "*", Rate: 1, Lose: true}})
	before := ran
	if _, err := both.run(context.Background(), "CreateVolume", nil, call); ran != before || status.Code(err) != codes.Unavailable {
		t.Errorf("error then lose: ran %d more times, got %v", ran-before, err)
	}
}

// TestFaultsRate checks that rate gates hang and lose as it gates error, and never a delay.
func TestFaultsRate(t *testing.T) {
	f := newFaults([]FaultRule{{Method: "*", Rate: 0.5, Lose: true, Code: codes.Unavailable}, {Method: "*", Rate: 0.5, Hang: true, Delay: time.Millisecond}})
	draws := []float64{0.9, 0.9, 0.1, 0.9}
	f.rand = func() float64 { d := draws[0]; draws = draws[1:]; return d }
	ran := 0
	call := func() (any, error) { ran++; return "ok", nil }
	start := time.Now()
	if resp, err := f.run(context.Background(), "CreateVolume", nil, call); resp != "ok" || err != nil || ran != 1 {
		t.Errorf("no rule fired: %v %v", resp, err)
	}
	if time.Since(start) < time.Millisecond {
		t.Errorf("the delay was skipped although its rule did not fire")
	}
	if _, err := f.run(context.Background(), "CreateVolume", nil, call); status.Code(err) != codes.Unavailable || ran != 2 {
		t.Errorf("lose fired: ran %d, %v", ran, err)
	}
}
