package localcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowestPort is where FreePorts starts: above the ports Kubernetes components listen on by
// default (10250 the kubelet's, 10257 the controller-manager's, 10259 the scheduler's).
const lowestPort = 20000

// FreePorts returns n distinct loopback ports that are free now, for servers that bind them
// a little later. They come from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port from that range, once closed again, can be taken by
// any outgoing connection on the machine before its server binds it (a busy test run opens
// thousands), and the server then fails with "address already in use". Where the range
// leaves too little room below it, the kernel picks.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	listen := func(port int) error {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			ls = append(ls, l) // held until all n are chosen, so they are distinct
		}
		return err
	}
	var ports []int
	if high := ephemeralLow(); high-lowestPort >= 1000 {
		for try := 0; len(ports) < n && try < 100*n; try++ {
			port := lowestPort + rand.IntN(high-lowestPort)
			if listen(port) == nil {
				ports = append(ports, port)
			}
		}
		if len(ports) < n {
			return nil, fmt.Errorf("no %d free loopback ports in %d-%d", n, lowestPort, high-1)
		}
		return ports, nil
	}
	for range n {
		if err := listen(0); err != nil {
			return nil, err
		}
		ports = append(ports, ls[len(ls)-1].Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0 if unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
