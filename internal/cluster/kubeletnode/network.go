package kubeletnode

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The node's network is two bridges on the host, both created here before the kubelet
// starts:
//   - HostLink, with no ports, holds NodeIP: the kubelet refuses a loopback node IP, and
//     the apiserver reaches the kubelet at this machine-local address.
//   - Bridge, the pods' bridge, holds the pod subnet's first address. The CNI bridge plugin
//     attaches each pod's veth to it (isGateway false: the plugin leaves the address alone
//     and never switches on IP forwarding). Without the address the host had no route to
//     the pods, so what the host sends to a pod IP (the kubelet's HTTP and TCP probes, the
//     apiserver's pod proxy) followed the default route off the machine instead of reaching
//     the pod. Pods get no route but the bridge's own subnet: they reach each other and the
//     host's address on the bridge, nothing beyond this machine.

// ensureNetwork creates both bridges with their addresses; it is idempotent.
func (n *Node) ensureNetwork() error {
	gw, prefix, err := n.podGateway()
	if err != nil {
		return err
	}
	if err := ensureBridge(n.HostLink(), n.NodeIP()+"/32"); err != nil {
		return err
	}
	if err := subnetFree(netip.PrefixFrom(gw, prefix).Masked(), n.Bridge()); err != nil {
		return err
	}
	return ensureBridge(n.Bridge(), fmt.Sprintf("%s/%d", gw, prefix))
}

// subnetFree refuses a pod subnet that an interface other than the node's own bridge has an
// address in: the host's route to the pods would then be ambiguous.
func subnetFree(subnet netip.Prefix, own string) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, i := range ifaces {
		if i.Name == own {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			p, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			if subnet.Overlaps(netip.PrefixFrom(p.Unmap(), ones)) {
				return fmt.Errorf("kubeletnode: pod subnet %s overlaps %s on %s: choose another subnet", subnet, a, i.Name)
			}
		}
	}
	return nil
}

// podGateway is the host's address on the pods' bridge: the subnet's first address, which
// host-local is told to keep for the gateway so no pod gets it.
func (n *Node) podGateway() (netip.Addr, int, error) {
	p, err := netip.ParsePrefix(n.o.Subnet)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("kubeletnode: pod subnet %q: %w", n.o.Subnet, err)
	}
	p = p.Masked()
	if !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Addr{}, 0, fmt.Errorf("kubeletnode: pod subnet %q: want an IPv4 prefix of /30 or wider", n.o.Subnet)
	}
	return p.Addr().Next(), p.Bits(), nil
}

func ensureBridge(name, addr string) error {
	if !linkExists(name) {
		if err := ipCommand("link", "add", name, "type", "bridge"); err != nil {
			return err
		}
	}
	if err := ipCommand("addr", "replace", addr, "dev", name); err != nil {
		return err
	}
	return ipCommand("link", "set", name, "up")
}

func ipCommand(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}
