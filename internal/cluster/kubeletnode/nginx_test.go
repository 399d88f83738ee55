package kubeletnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// TestSharedLibrariesRunInRoot copies a dynamically linked host program with the closure
// sharedLibraries finds into an empty root, as NginxImages does, and runs it there: a
// library left out would stop the loader.
func TestSharedLibrariesRunInRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chroot)")
	}
	const prog = "/usr/bin/ls"
	libs, err := sharedLibraries(prog)
	if err != nil {
		t.Fatal(err)
	}
	var haveLibc, haveInterp bool
	for _, l := range libs {
		haveLibc = haveLibc || filepath.Base(l) == "libc.so.6"
		haveInterp = haveInterp || strings.HasPrefix(filepath.Base(l), "ld-linux")
	}
	if !haveLibc || !haveInterp {
		t.Fatalf("sharedLibraries(%s) = %v: want libc.so.6 and the loader", prog, libs)
	}
	l := ociimage.NewLayer().HostFile("bin/ls", prog, 0o755).Dir("data", 0o755)
	for _, lib := range libs {
		l.HostFile(lib, lib, 0o755)
	}
	rootfs := unpackLayers(t, l)
	out, err := exec.Command("chroot", rootfs, "/bin/ls", "/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "data") {
		t.Fatalf("ls in a root of the program and its libraries: %v: %s", err, out)
	}
}

// unpackLayers writes layers, in order, into a new root directory and returns it.
func unpackLayers(t *testing.T, layers ...*ociimage.Layer) string {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		tarPath := filepath.Join(dir, fmt.Sprintf("layer%d.tar", i))
		f, err := os.Create(tarPath)
		if err != nil {
			t.Fatal(err)
		}
		err = l.WriteTar(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("tar", "-xf", tarPath, "-C", rootfs).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v: %s", err, out)
		}
	}
	return rootfs
}
