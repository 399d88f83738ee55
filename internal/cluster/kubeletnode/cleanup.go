package kubeletnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
)

func (n *Node) dialCRI() (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+n.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// RuntimeReady is containerd's health check: its CRI answers Version.
func (n *Node) RuntimeReady(ctx context.Context) error {
	conn, err := n.dialCRI()
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = cri.NewRuntimeServiceClient(conn).Version(ctx, &cri.VersionRequest{})
	return err
}

// RemovePods stops and removes every pod sandbox and container through containerd's CRI, as
// the kubelet does when it deletes a pod: the containers are killed, the CNI plugins release
// the pod's address and veth, and the network namespace and sandbox mounts go away.
// containerd must be running.
func (n *Node) RemovePods(ctx context.Context) error {
	conn, err := n.dialCRI()
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)
	var errs []error
	cs, err := rs.ListContainers(ctx, &cri.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("CRI ListContainers: %w", err)
	}
	for _, c := range cs.Containers {
		if _, err := rs.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: c.Id, Timeout: 5}); err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", c.Id, err))
		}
		if _, err := rs.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.Id, err))
		}
	}
	ps, err := rs.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("CRI ListPodSandbox: %w", err))...)
	}
	for _, p := range ps.Items {
		if _, err := rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", p.Id, err))
		}
		if _, err := rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", p.Id, err))
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes what is left once containerd and the kubelet have stopped (or crashed):
// processes in the node's cgroups and containerd's shims for this node's socket, every
// mount and loop device under the node's directory, the bridge, the cgroup roots and the
// kubelet's container log links and the host directories it created. It is safe to run more
// than once.
func (n *Node) Cleanup() error {
	var errs []error
	errs = append(errs, n.killCgroupProcesses(), n.killShims())
	if err := backend.Release(n.o.Dir); err != nil {
		errs = append(errs, err)
	}
	for _, l := range []string{n.Bridge(), n.HostLink()} {
		if linkExists(l) {
			errs = append(errs, ipCommand("link", "delete", l))
		}
	}
	errs = append(errs, n.removeCgroups(), n.removeLogLinks(), n.removeHostDirs())
	return errors.Join(errs...)
}

// Leftovers lists what Cleanup would remove, for tests that check that nothing is left.
func (n *Node) Leftovers() ([]string, error) {
	var out []string
	held, err := backend.Leftovers(n.o.Dir)
	if err != nil {
		return nil, err
	}
	out = append(out, held...)
	for _, pid := range n.shimPIDs() {
		out = append(out, "process "+strconv.Itoa(pid)+" (containerd shim)")
	}
	if deadSocket(kubeletSocket()) {
		out = append(out, "socket "+kubeletSocket()+" (no kubelet listens)")
	}
	for _, d := range n.createdHostDirs() {
		// One still in use holds another kubelet's socket: it is that kubelet's to leave.
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			out = append(out, "directory "+d)
		}
	}
	_ = n.forEachCgroupHierarchy(func(dir string) error {
		if _, err := os.Stat(dir); err == nil {
			out = append(out, "cgroup "+dir)
		}
		return nil
	})
	for _, l := range []string{n.Bridge(), n.HostLink()} {
		if linkExists(l) {
			out = append(out, "bridge "+l)
		}
	}
	if links, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, l := range links {
			if master, err := os.Readlink(filepath.Join("/sys/class/net", l.Name(), "master")); err == nil && filepath.Base(master) == n.Bridge() {
				out = append(out, "veth "+l.Name())
			}
		}
	}
	if ns, _ := filepath.Glob(n.path("containerd", "state", "*", "netns", "*")); len(ns) > 0 {
		for _, p := range ns {
			out = append(out, "netns "+p)
		}
	}
	return out, nil
}

// killCgroupProcesses kills every process in the node's cgroups: containers whose shim is
// gone are reparented, not killed.
func (n *Node) killCgroupProcesses() error {
	return n.forEachCgroupHierarchy(func(root string) error {
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	})
}

// removeCgroups removes the node's cgroup directories, deepest first, waiting briefly for
// killed processes to leave them.
func (n *Node) removeCgroups() error {
	var errs []error
	_ = n.forEachCgroupHierarchy(func(root string) error {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, fs.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir cgroup %s: %w", d, err))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

// shimPIDs are the containerd shims started for this node's containerd: their command line
// names its socket.
func (n *Node) shimPIDs() []int {
	return pidsWhere(func(args []string) bool {
		return strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, n.Socket())
	})
}

// KubeletPID is the kubelet (kubevol-cluster kubelet) whose --root-dir is rootDir.
func KubeletPID(rootDir string) (int, error) {
	pids := pidsWhere(func(args []string) bool {
		return len(args) > 1 && args[1] == "kubelet" && slices.Contains(args, "--root-dir="+rootDir)
	})
	if len(pids) == 0 {
		return 0, fmt.Errorf("no kubelet with --root-dir=%s", rootDir)
	}
	return pids[0], nil
}

// pidsWhere lists the processes whose command line matches.
func pidsWhere(match func(args []string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (n *Node) killShims() error {
	for _, pid := range n.shimPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for range 50 {
		if len(n.shimPIDs()) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("containerd shims %v did not exit", n.shimPIDs())
}

// removeLogLinks removes the kubelet's links in /var/log/containers (a fixed path) into this
// node's pod logs.
func (n *Node) removeLogLinks() error {
	entries, err := os.ReadDir("/var/log/containers")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, n.path("pod-logs")+"/") {
			_ = os.Remove(p)
		}
	}
	return nil
}
