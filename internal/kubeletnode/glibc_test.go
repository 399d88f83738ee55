package kubeletnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The glibc-dns-testing image's root (busybox, then glibc's getent) runs what the storage
// suite's multiVolume specs run in it (a shell writing and reading a file) and resolves a
// name through glibc.
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
	out, err := exec.Command("chroot", rootfs, "/bin/sh", "-c", "echo data > /mnt/volume1/f && cat /mnt/volume1/f && getent hosts volume-host").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "data") || !strings.Contains(string(out), "10.0.0.7") {
		t.Fatalf("in the image's root: %v: %s", err, out)
	}
}
