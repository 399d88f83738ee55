package removeall

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestAllRemovesTreeWithoutFollowingLinks(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	mkdirs(t, outside)
	write(t, filepath.Join(outside, "keep"), "x")
	tree := filepath.Join(base, "tree")
	mkdirs(t, filepath.Join(tree, "a", "b"))
	write(t, filepath.Join(tree, "a", "b", "f"), "1")
	write(t, filepath.Join(tree, "g"), "2")
	must(t, os.Symlink(outside, filepath.Join(tree, "a", "link")))
	must(t, os.Symlink(filepath.Join(outside, "keep"), filepath.Join(tree, "flink")))
	must(t, os.Chmod(filepath.Join(tree, "a", "b"), 0o500)) // unwritable dirs are ours too

	if err := All(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", tree, err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "x" {
		t.Errorf("a link was followed: %q %v", b, err)
	}
	if err := All(tree); err != nil {
		t.Errorf("missing path: %v", err)
	}
	// A file or a symlink as the root is unlinked.
	link := filepath.Join(base, "rootlink")
	must(t, os.Symlink(outside, link))
	must(t, All(link))
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("root symlink was followed: %v", err)
	}
}

// A mount under the tree (another filesystem, and a bind mount of the same one, which a
// device comparison cannot see) stops the removal of that entry only: the mounted data
// survives, the error names the mount point, the rest is removed.
func TestAllStopsAtMounts(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "pod")
	tmpfs := filepath.Join(tree, "volumes", "mem")
	bind := filepath.Join(tree, "volumes", "bind")
	src := filepath.Join(base, "src")
	mkdirs(t, tmpfs, bind, src, filepath.Join(tree, "other"))
	write(t, filepath.Join(src, "data"), "bound")
	write(t, filepath.Join(tree, "other", "f"), "gone")
	mount(t, "tmpfs", tmpfs, "tmpfs", 0)
	write(t, filepath.Join(tmpfs, "data"), "precious")
	mount(t, src, bind, "", unix.MS_BIND)

	err := All(tree)
	if !errors.Is(err, ErrMountPoint) {
		t.Fatalf("removal over mounts: %v", err)
	}
	t.Log(err)
	if got := read(t, filepath.Join(tmpfs, "data")); got != "precious" {
		t.Errorf("tmpfs data = %q", got)
	}
	if got := read(t, filepath.Join(src, "data")); got != "bound" {
		t.Errorf("bind-mounted data = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(tree, "other")); !os.IsNotExist(err) {
		t.Errorf("sibling of the mounts not removed: %v", err)
	}
	// The root itself being a mount point is refused too.
	if err := All(tmpfs); !errors.Is(err, ErrMountPoint) {
		t.Errorf("removal of a mount point: %v", err)
	}
	if got := read(t, filepath.Join(tmpfs, "data")); got != "precious" {
		t.Errorf("tmpfs data = %q", got)
	}
}

func mount(t *testing.T, src, target, fstype string, flags uintptr) {
	t.Helper()
	if err := unix.Mount(src, target, fstype, flags, ""); err != nil {
		t.Fatalf("mount %s: %v", target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, 0); err != nil {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		must(t, os.MkdirAll(d, 0o755))
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	must(t, os.WriteFile(p, []byte(s), 0o644))
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("read %s: %v", p, err)
	}
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
