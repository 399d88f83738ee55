package kubeletnode

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A socket something listens on is kept; the socket of a process that died is removed.
func TestRemoveDeadSocket(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dead := filepath.Join(dir, "dead.sock")
	d, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	d.(*net.UnixListener).SetUnlinkOnClose(false)
	d.Close()
	removeDeadSocket(live)
	removeDeadSocket(dead)
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("the live socket went: %v", err)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead socket stayed: %v", err)
	}
}

// Only directories absent before the node's first Prepare are removed, and only once empty.
func TestHostDirsOnlyOurs(t *testing.T) {
	n := &Node{o: Options{Dir: t.TempDir()}}
	base := t.TempDir()
	ours, theirs := filepath.Join(base, "ours"), filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	saved := hostKubeletDirs
	hostKubeletDirs = []string{ours, theirs}
	t.Cleanup(func() { hostKubeletDirs = saved })
	if err := n.noteHostDirs(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ours, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.removeHostDirs(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ours); !os.IsNotExist(err) {
		t.Errorf("the directory the node created stayed: %v", err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("a directory that was there before went: %v", err)
	}
}

// A dead kubelet socket goes at Cleanup even from a directory that was there before the
// node (another run, stopped at the same time, left it); the directory stays.
func TestDeadSocketInOldDirRemoved(t *testing.T) {
	n := &Node{o: Options{Dir: t.TempDir()}}
	theirs := t.TempDir()
	saved := hostKubeletDirs
	hostKubeletDirs = []string{theirs}
	t.Cleanup(func() { hostKubeletDirs = saved })
	if err := n.noteHostDirs(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", kubeletSocket())
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if left, _ := n.Leftovers(); len(left) == 0 {
		t.Error("Leftovers does not name the dead kubelet socket")
	}
	if err := n.removeHostDirs(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(kubeletSocket()); !os.IsNotExist(err) {
		t.Errorf("the dead socket stayed: %v", err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("the directory that was there before went: %v", err)
	}
}
