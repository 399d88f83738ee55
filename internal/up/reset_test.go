package up

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/mount-utils"
)

// Reset takes down the mounts (nested ones included) and the loop devices a stopped stack
// left under its directory, then removes it.
func TestResetUnmountsAndDetaches(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	src := filepath.Join(state, "driver", "volumes", "v1")
	target := filepath.Join(state, "node", "pods", "uid", "mount")
	inner := filepath.Join(target, "inner")
	for _, d := range []string{src, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := mount.New("")
	t.Cleanup(func() {
		for _, p := range []string{inner, target} {
			_ = m.Unmount(p)
		}
	})
	if err := m.Mount(src, target, "", []string{"bind"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("tmpfs", inner, "tmpfs", nil); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(state, "driver", "image")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })

	if err := Reset(state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("%s still exists: %v", state, err)
	}
	mps, _ := m.List()
	for _, mp := range mps {
		if strings.HasPrefix(mp.Path, dir+"/") {
			t.Errorf("mount left: %s", mp.Path)
		}
	}
	// The image is gone, so ask the device: a detached loop device has no backing file.
	if b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")); err == nil {
		t.Errorf("loop device %s left, backed by %s", dev, b)
	}
}
