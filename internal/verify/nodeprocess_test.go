package verify

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// nodeProcess tells the real kubelet (kubevol up --runtime containerd's node) from kubevol's
// node agent by its command line, and finds only the one serving the root it is given.
func TestNodeProcessFindsAKubeletByItsRootDir(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "kubelet-root")
	// A shell named kubelet, its --root-dir argument its $0: the command line of a kubelet
	// binary serving root.
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.Symlink("/bin/sh", kubelet); err != nil {
		t.Fatal(err)
	}
	// The shell stays (a last command may replace it by exec): it waits for its sleep.
	cmd := exec.Command(kubelet, "-c", "echo running; sleep 30 & wait", "--root-dir="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The sleep goes with its shell: the whole process group.
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	// Start returns once the exec has begun, before the kernel has set up the new command
	// line (/proc/PID/cmdline reads empty meanwhile): the shell's first line says it runs.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pid, isKubelet, err := nodeProcess(root)
	if err != nil {
		t.Fatal(err)
	}
	if pid != cmd.Process.Pid || !isKubelet {
		t.Errorf("nodeProcess(%s) = %d, kubelet %v; want %d, kubelet true", root, pid, isKubelet, cmd.Process.Pid)
	}
	if _, _, err := nodeProcess(root + "-other"); err == nil {
		t.Errorf("nodeProcess found a node process for a root nothing serves")
	}
}
