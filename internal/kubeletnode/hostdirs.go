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
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		_ = os.Remove(path)
	}
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

// removeHostDirs removes the noted directories that are empty once a dead kubelet's socket
// is gone; one another kubelet still uses (its socket answers) stays.
func (n *Node) removeHostDirs() error {
	for _, d := range n.createdHostDirs() {
		removeDeadSocket(filepath.Join(d, "kubelet.sock"))
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
