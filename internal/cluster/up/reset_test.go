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
	if marked, err := claimDir(state); err != nil || !marked {
		t.Fatalf("claim: %v %v", marked, err)
	}
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

// Reset removes only a directory up marked as its own: a typo'd --dir, a directory of an
// older up, or one whose marker was written for another path, is refused with its data.
func TestResetRefusesUnmarked(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	mustWrite(t, filepath.Join(home, "user", "precious"), "x")
	err := Reset(home)
	if err == nil || !strings.Contains(err.Error(), home) || !strings.Contains(err.Error(), MarkerFile) {
		t.Errorf("unmarked dir: %v", err)
	}
	t.Log(err)
	// A non-empty directory is not marked by a start either.
	if marked, err := claimDir(home); err != nil || marked {
		t.Errorf("claim of a non-empty dir: %v %v", marked, err)
	}
	if err := Reset(home); err == nil {
		t.Error("reset after a start in a non-empty dir")
	}

	// A marker written for another directory (copied, or the dir moved).
	other := filepath.Join(base, "other")
	if marked, err := claimDir(other); err != nil || !marked {
		t.Fatalf("claim: %v %v", marked, err)
	}
	mustWrite(t, filepath.Join(other, "etcd", "db"), "x")
	moved := filepath.Join(base, "moved")
	if err := os.Rename(other, moved); err != nil {
		t.Fatal(err)
	}
	if err := Reset(moved); err == nil || !strings.Contains(err.Error(), "written for") {
		t.Errorf("moved dir: %v", err)
	}
	// A marker that is not a regular file or not ours.
	odd := filepath.Join(base, "odd")
	mustWrite(t, filepath.Join(odd, "f"), "x")
	if err := os.Symlink(filepath.Join(moved, MarkerFile), filepath.Join(odd, MarkerFile)); err != nil {
		t.Fatal(err)
	}
	if err := Reset(odd); err == nil {
		t.Error("symlinked marker accepted")
	}
	for _, p := range []string{filepath.Join(home, "user", "precious"), filepath.Join(moved, "etcd", "db"), filepath.Join(odd, "f")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("refused reset removed %s: %v", p, err)
		}
	}
}

// A missing or empty directory is nothing to wipe; a fresh directory is marked, wiped and
// can be claimed again; a marker written by hand for an old up directory is honoured.
func TestResetMarkedAndEmpty(t *testing.T) {
	base := t.TempDir()
	if err := Reset(filepath.Join(base, "missing")); err != nil {
		t.Errorf("missing dir: %v", err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Reset(empty); err != nil {
		t.Errorf("empty dir: %v", err)
	}
	dir := filepath.Join(base, "up")
	if marked, err := claimDir(dir); err != nil || !marked {
		t.Fatalf("claim: %v %v", marked, err)
	}
	mustWrite(t, filepath.Join(dir, "driver", "volumes", "v", "f"), "x")
	if err := Reset(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", dir, err)
	}
	old := filepath.Join(base, "old")
	mustWrite(t, filepath.Join(old, "kubeconfig"), "x")
	mustWrite(t, filepath.Join(old, MarkerFile), markerHeader+"\ndir: "+old+"\n") // what the refusal tells the user to run
	if err := Reset(old); err != nil {
		t.Errorf("hand-marked dir: %v", err)
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
