package kubeletnode

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPodGateway(t *testing.T) {
	for subnet, want := range map[string]string{"10.250.7.0/24": "10.250.7.1", "10.250.7.9/24": "10.250.7.1", "192.168.0.0/16": "192.168.0.1"} {
		n, err := New(Options{Dir: t.TempDir(), NodeName: "n", ClusterBinary: "x", CNIBinDir: "x", Subnet: subnet})
		if err != nil {
			t.Fatal(err)
		}
		if gw, _, _ := n.podGateway(); gw.String() != want {
			t.Errorf("%s: gateway %s, want %s", subnet, gw, want)
		}
	}
	for _, bad := range []string{"10.250.0.0/31", "fd00::/64", "nonsense"} {
		if _, err := New(Options{Dir: t.TempDir(), NodeName: "n", ClusterBinary: "x", CNIBinDir: "x", Subnet: bad}); err == nil {
			t.Errorf("subnet %q accepted", bad)
		}
	}
	a, _ := New(Options{Dir: "/a", NodeName: "n", ClusterBinary: "x", CNIBinDir: "x"})
	b, _ := New(Options{Dir: "/b", NodeName: "n", ClusterBinary: "x", CNIBinDir: "x"})
	if a.o.Subnet == b.o.Subnet {
		t.Errorf("two node directories share the default subnet %s", a.o.Subnet)
	}
}

// A subnet that an interface of this machine holds (loopback's) is refused, naming it.
func TestSubnetInUseRefused(t *testing.T) {
	err := subnetFree(netip.MustParsePrefix("127.0.0.0/24"), "kvnone")
	if err == nil || !strings.Contains(err.Error(), "lo") {
		t.Fatalf("loopback's subnet: %v, want a refusal naming lo", err)
	}
	if err := subnetFree(netip.MustParsePrefix("127.0.0.0/24"), "lo"); err != nil {
		t.Errorf("the node's own interface is not a conflict: %v", err)
	}
}
