package kubeletnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// containerdConfig is containerd 1.6's configuration (version 2): its own root, state and
// socket, no metrics or debug listener, and the CRI plugin on the CNI network below.
func (n *Node) containerdConfig() string {
	q := strconv.Quote
	return strings.Join([]string{
		"version = 2",
		"root = " + q(n.path("containerd", "root")),
		"state = " + q(n.path("containerd", "state")),
		"[grpc]",
		"  address = " + q(n.Socket()),
		"[ttrpc]",
		"  address = " + q(n.Socket()+".ttrpc"),
		"[debug]",
		`  address = ""`,
		"[metrics]",
		`  address = ""`,
		`[plugins."io.containerd.internal.v1.opt"]`,
		"  path = " + q(n.path("containerd", "opt")),
		`[plugins."io.containerd.grpc.v1.cri"]`,
		"  sandbox_image = " + q(SandboxImage),
		// This sandbox refuses a negative oom_score_adj: without this every pod sandbox fails
		// in runc with "can't get final child's PID from pipe: EOF".
		"  restrict_oom_score_adj = true",
		// Network namespaces under the state directory, not /var/run/netns.
		"  netns_mounts_under_state_dir = true",
		`  stream_server_address = "127.0.0.1"`,
		`  stream_server_port = "0"`,
		`  [plugins."io.containerd.grpc.v1.cri".containerd]`,
		`    snapshotter = "overlayfs"`,
		`    default_runtime_name = "runc"`,
		`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`,
		`  [plugins."io.containerd.grpc.v1.cri".cni]`,
		"    bin_dir = " + q(n.o.CNIBinDir),
		"    conf_dir = " + q(n.path("cni", "net.d")),
		"    max_conf_num = 1",
		"",
	}, "\n")
}

// cniConfig is a bridge network that never leaves the machine: the bridge's address is the
// host's, set by ensureNetwork (isGateway false), nothing is masqueraded, and host-local
// hands out no route, so a pod reaches only the other pods and the host on this bridge.
func (n *Node) cniConfig() string {
	gw, _, _ := n.podGateway() // validated by New
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kubevol",
		"plugins": []any{
			map[string]any{
				"type":      "bridge",
				"bridge":    n.Bridge(),
				"isGateway": false,
				"ipMasq":    false,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.o.Subnet, "gateway": gw.String()}}},
					"dataDir": n.path("cni", "ipam"),
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	data, _ := json.MarshalIndent(conf, "", "  ")
	return string(data) + "\n"
}

// kubeletConfig is the KubeletConfiguration of this machine (what a kubelet v1.37 needs on
// a cgroup v1 host with containerd 1.6), on loopback ports, with its logs and cgroups under
// this node's names, and no image garbage collection or disk eviction: the images cannot be
// pulled again.
func (n *Node) kubeletConfig() string {
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"address":                  n.NodeIP(),
		"port":                     n.o.Port,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              n.o.HealthzPort,
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               n.CgroupRoot(),
		"failSwapOn":               false,
		"containerRuntimeEndpoint": "unix://" + n.Socket(),
		"imageServiceEndpoint":     "unix://" + n.Socket(),
		"podLogsDir":               n.path("pod-logs"),
		// No DNS server: pods get an empty resolv.conf rather than the host's resolvers.
		"resolvConf": "",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": n.o.CAFile},
		},
		"authorization":               map[string]any{"mode": "Webhook"},
		"rotateCertificates":          true,
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard":                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"staticPodPath":               "",
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	return string(data) + "\n"
}

// forEachCgroupHierarchy calls f with the cgroup root's directory in every mounted cgroup
// hierarchy (v1 controllers and the v2 unified one).
func (n *Node) forEachCgroupHierarchy(f func(dir string) error) error {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return f(filepath.Join("/sys/fs/cgroup", n.CgroupRoot())) // a pure v2 host
	}
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // symlinks such as cpu,cpuacct
		}
		if err := f(filepath.Join(p, n.CgroupRoot())); err != nil {
			return err
		}
	}
	return nil
}
