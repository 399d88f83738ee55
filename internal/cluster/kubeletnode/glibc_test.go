package kubeletnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The glibc-dns-testing image's root (busybox, then dash, coreutils and glibc's getent) runs what
// the storage suite's multiVolume specs run in it (a shell writing a file with GNU dd and
// reading it) and resolves a name through glibc.
func TestGlibcDNSTestingRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chroot)")
	}
	bb, err := busyboxLayer()
	if err != nil {
		t.Fatal(err)
	}
	top, err := glibcLayer()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := unpackLayers(t, bb, top)
	// The kubelet writes /etc/hosts into every container.
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "hosts"), []byte("127.0.0.1 localhost\n10.0.0.7 volume-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "mnt", "volume1"), 0o755); err != nil {
		t.Fatal(err)
	}
	// What CheckWriteToPath runs for a block volume: busybox's dd has no oflag=nocache.
	cmd := exec.Command("chroot", rootfs, "/bin/sh", "-c", "echo data | dd of=/mnt/volume1/f oflag=nocache bs=5 count=1 && cat /mnt/volume1/f && getent hosts volume-host && dd --version")
	cmd.Env = []string{debianPath}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "data") || !strings.Contains(string(out), "10.0.0.7") || !strings.Contains(string(out), "dd (coreutils)") {
		t.Fatalf("in the image's root: %v: %s", err, out)
	}
	// A program of dash or coreutils replaced the busybox applet of its name; the others stay.
	if fi, err := os.Lstat(filepath.Join(rootfs, "bin", "cat")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("bin/cat in the image: %v, %v; want GNU cat, a regular file", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(rootfs, "bin", "sh")); err != nil || target != "dash" {
		t.Errorf("bin/sh in the image: %q, %v; want dash", target, err)
	}
	if target, err := os.Readlink(filepath.Join(rootfs, "bin", "blockdev")); err != nil || target != "busybox" {
		t.Errorf("bin/blockdev in the image: %q, %v; want busybox's applet", target, err)
	}
}
