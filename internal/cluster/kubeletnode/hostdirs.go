package kubeletnode

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The kubelet keeps its device-plugin socket in /var/lib/kubelet/device-plugins whatever its
// --root-dir (upstream hard-codes the path). The directories it creates there are this
// node's only files outside its own directory: Prepare notes which of them did not exist,
// and Cleanup removes those once empty, never one that was there before.
var hostKubeletDirs = []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet"} // deepest first

func (n *Node) hostDirsNote() string { return n.path("host-dirs-created") }

// noteHostDirs records the host directories the kubelet is about to create. A note left by
// an earlier run is kept: those directories were that run's, and so this node's.
func (n *Node) noteHostDirs() error {
	if _, err := os.Stat(n.hostDirsNote()); err == nil {
		return nil
	}
	var absent []string
	for _, d := range hostKubeletDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, d)
		}
	}
	return os.WriteFile(n.hostDirsNote(), []byte(strings.Join(absent, "\n")), 0o640)
}

// removeDeadSocket removes a unix socket nobody listens on: a kubelet killed with SIGKILL
// leaves its socket behind.
func removeDeadSocket(path string) {
	if deadSocket(path) {
		_ = os.Remove(path)
	}
}

// deadSocket reports whether path is a unix socket that refuses connections.
func deadSocket(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return false
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// createdHostDirs are the noted directories that still exist.
func (n *Node) createdHostDirs() []string {
	raw, err := os.ReadFile(n.hostDirsNote())
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range strings.Fields(string(raw)) {
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// kubeletSocket is the device-plugin socket the kubelet replaces at each start.
func kubeletSocket() string { return filepath.Join(hostKubeletDirs[0], "kubelet.sock") }

// removeHostDirs removes a dead kubelet's socket, then the noted directories that are empty;
// one another kubelet still uses (its socket answers) stays. The socket goes even from a
// directory that was there before: this node's kubelet replaced whatever socket was there
// when it started, so a dead one is this node's or that of a kubelet that died after it, and
// a kubelet makes a new one when it starts.
func (n *Node) removeHostDirs() error {
	removeDeadSocket(kubeletSocket())
	for _, d := range n.createdHostDirs() {
		if err := os.Remove(d); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			return err
		}
	}
	if len(n.createdHostDirs()) > 0 {
		return nil // kept, with its note, for the next Cleanup
	}
	if err := os.Remove(n.hostDirsNote()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
