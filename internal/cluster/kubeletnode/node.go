// Package kubeletnode sets up the node of `kubevol up --runtime containerd`: the upstream
// kubelet on containerd and runc, with a CNI bridge that keeps pods on this machine. It
// writes the configurations (containerd's, the CNI network's, the KubeletConfiguration),
// names the processes to run and their health checks, imports images, and takes down
// everything the node made (Cleanup); internal/cluster/up starts and supervises the processes.
//
// Everything lives under one directory, and every host-wide name (the bridge, the cgroup
// root) is derived from it, so two nodes on one machine never share anything.
package kubeletnode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// SandboxImage is the pod sandbox image containerd runs for every pod; it is built here
// (images.go), never pulled.
const SandboxImage = "registry.k8s.io/pause:3.10.2"

// Options describe one node.
type Options struct {
	// Dir holds all of the node's state. Required.
	Dir string
	// NodeName is the Node the kubelet registers.
	NodeName string
	// ClusterBinary is the kubevol-cluster binary that runs the kubelet.
	ClusterBinary string
	// CNIBinDir holds the CNI plugins bridge, host-local and loopback.
	CNIBinDir string
	// CAFile is the cluster CA: the kubelet authenticates clients (the apiserver) with it.
	CAFile string
	// BootstrapKubeconfig is the kubelet's bootstrap credential; it files a CSR for its
	// client certificate with it, as a kubeadm node does.
	BootstrapKubeconfig string
	// Port and HealthzPort are the kubelet's loopback ports.
	Port, HealthzPort int
	// VolumeManager is the kubelet's volume manager: VolumeManagerKubevol for kubevol's
	// (pkg/volumemanager, linked into kubevol-cluster's kubelet), VolumeManagerKubelet or ""
	// for the kubelet's own.
	VolumeManager string
	// Subnet is the pods' network (IPv4); empty means a /24 in 10.250.0.0/16 derived from
	// Dir. Its first address is the host's on the pods' bridge, so two nodes on one machine
	// need different subnets: Prepare refuses one that another interface already holds.
	Subnet string
}

// Node is the node's layout and processes.
type Node struct {
	o Options
	// id is derived from Dir: the bridge and the cgroup root are named after it.
	id      string
	idBytes [32]byte
}

// New validates o and returns the node's layout; it starts nothing.
func New(o Options) (*Node, error) {
	if o.Dir == "" || o.NodeName == "" || o.ClusterBinary == "" || o.CNIBinDir == "" {
		return nil, fmt.Errorf("kubeletnode: Dir, NodeName, ClusterBinary and CNIBinDir are required")
	}
	switch o.VolumeManager {
	case "", VolumeManagerKubelet, VolumeManagerKubevol:
	default:
		return nil, fmt.Errorf("kubeletnode: volume manager %q: want %s or %s", o.VolumeManager, VolumeManagerKubevol, VolumeManagerKubelet)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	sum := sha256.Sum256([]byte(dir))
	if o.Subnet == "" {
		o.Subnet = fmt.Sprintf("10.250.%d.0/24", sum[2])
	}
	n := &Node{o: o, id: hex.EncodeToString(sum[:])[:8], idBytes: sum}
	if _, _, err := n.podGateway(); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.o.Dir}, elem...)...)
}

// Socket is containerd's CRI and API socket.
func (n *Node) Socket() string { return n.path("containerd", "containerd.sock") }

// Bridge is the name of the pods' bridge on the host (at most 15 characters).
func (n *Node) Bridge() string { return "kv" + n.id }

// HostLink is the name of the host-side bridge without ports that holds NodeIP.
func (n *Node) HostLink() string { return "kv" + n.id + "h" }

// NodeIP is the Node's InternalIP, on HostLink: the kubelet refuses a loopback node IP, and
// this address is local to the machine (a /32 on an interface with no ports; pods have no
// route to it).
func (n *Node) NodeIP() string {
	return fmt.Sprintf("10.251.%d.%d", n.idBytes[0], n.idBytes[1]|1)
}

// CgroupRoot is the kubelet's cgroup root in every hierarchy: all pods' cgroups are under it.
func (n *Node) CgroupRoot() string { return "/kubevol-" + n.id }

// KubeletRootDir is the kubelet's --root-dir: pods' volumes, plugins and plugins_registry.
func (n *Node) KubeletRootDir() string { return n.path("kubelet") }

// PluginsRegistry is where a CSI driver registers itself with the kubelet.
func (n *Node) PluginsRegistry() string { return n.path("kubelet", "plugins_registry") }

// KubeconfigPath is the kubelet's client kubeconfig, written once its CSR is approved.
func (n *Node) KubeconfigPath() string { return n.path("kubelet.kubeconfig") }

// HealthURL is the kubelet's /healthz.
func (n *Node) HealthURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(n.o.HealthzPort) + "/healthz"
}

// Command is one process of the node: its name, binary and arguments.
type Command struct {
	Name string
	Path string
	Args []string
	// Env is added to the environment.
	Env []string
}

// Containerd is the containerd process, on its own configuration only.
func (n *Node) Containerd() Command {
	return Command{Name: "containerd", Path: "containerd", Args: []string{"--config", n.path("containerd", "config.toml")}}
}

// Kubelet is the kubelet process.
func (n *Node) Kubelet() Command {
	return Command{Name: "kubelet", Path: n.o.ClusterBinary, Args: []string{"kubelet",
		"--config=" + n.path("kubelet-config.yaml"),
		"--kubeconfig=" + n.KubeconfigPath(),
		"--bootstrap-kubeconfig=" + n.o.BootstrapKubeconfig,
		"--cert-dir=" + n.path("kubelet-pki"),
		"--root-dir=" + n.KubeletRootDir(),
		"--hostname-override=" + n.o.NodeName,
		// The apiserver reaches the kubelet at this address (its --kubelet-preferred-address-types
		// is InternalIP): the node's name need not resolve.
		"--node-ip=" + n.NodeIP(),
		"--v=2",
	}, Env: []string{volumeManagerEnv + "=" + n.volumeManager()}}
}

// The kubelet's volume managers. Kubelet flags are strict, so kubevol-cluster's kubelet is
// told which to run by its environment (cmd/kubevol-cluster/kubeletvm).
const (
	VolumeManagerKubevol = "kubevol"
	VolumeManagerKubelet = "kubelet"
	volumeManagerEnv     = "KUBEVOL_VOLUME_MANAGER"
)

func (n *Node) volumeManager() string {
	if n.o.VolumeManager == "" {
		return VolumeManagerKubelet
	}
	return n.o.VolumeManager
}

// Prepare writes every configuration and creates the directories and cgroup roots. It is
// idempotent.
func (n *Node) Prepare() error {
	for _, d := range []string{n.path("containerd"), n.path("cni", "net.d"), n.path("cni", "ipam"), n.path("kubelet-pki"),
		n.PluginsRegistry(), n.path("pod-logs"), n.path("images")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	files := map[string]string{
		n.path("containerd", "config.toml"):           n.containerdConfig(),
		n.path("cni", "net.d", "10-kubevol.conflist"): n.cniConfig(),
		n.path("kubelet-config.yaml"):                 n.kubeletConfig(),
	}
	for p, data := range files {
		if err := os.WriteFile(p, []byte(data), 0o640); err != nil {
			return err
		}
	}
	if err := n.ensureNetwork(); err != nil {
		return err
	}
	if err := n.noteHostDirs(); err != nil {
		return err
	}
	// The kubelet refuses a cgroup root that does not exist.
	return n.forEachCgroupHierarchy(func(dir string) error { return os.MkdirAll(dir, 0o755) })
}
