package localcluster

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, free, and outside the kernel's ephemeral range, where an outgoing
// connection could take one before its server binds it.
func TestFreePortsOutsideTheEphemeralRange(t *testing.T) {
	high := ephemeralLow()
	if high-lowestPort < 1000 {
		t.Fatalf("this machine's ephemeral range starts at %d: no room below it to test", high)
	}
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lowestPort || p >= high {
			t.Errorf("port %d outside %d-%d", p, lowestPort, high-1)
		}
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
