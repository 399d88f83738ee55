package subpath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"k8s.io/mount-utils"
)

func TestPrepareRefusesEscapes(t *testing.T) {
	vol := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600)
	os.Symlink(outside, filepath.Join(vol, "escape"))
	os.Symlink("../../../../..", filepath.Join(vol, "up"))
	os.Mkdir(filepath.Join(vol, "ok"), 0o755)
	os.Symlink("ok", filepath.Join(vol, "inside"))
	m := mount.NewFakeMounter(nil)
	targets := t.TempDir()
	for _, bad := range []string{"escape", "escape/secret", "up", "../x", "/etc"} {
		err := Prepare(m, vol, bad, filepath.Join(targets, "t"), false)
		if !errors.Is(err, ErrEscapes) {
			t.Errorf("%q: %v, want ErrEscapes", bad, err)
		}
	}
	if len(m.MountPoints) != 0 {
		t.Fatalf("mounted %v", m.MountPoints)
	}
	// A symlink that stays inside is fine; a missing subPath is created as a directory.
	if err := Prepare(m, vol, "inside", filepath.Join(targets, "a"), false); err != nil {
		t.Errorf("inside: %v", err)
	}
	if err := Prepare(m, vol, "new/dir", filepath.Join(targets, "b"), true); err != nil {
		t.Errorf("new: %v", err)
	}
	if info, err := os.Stat(filepath.Join(vol, "new/dir")); err != nil || !info.IsDir() {
		t.Errorf("subPath not created: %v", err)
	}
	if len(m.MountPoints) != 2 || m.MountPoints[1].Opts[1] != "ro" {
		t.Errorf("mounts %+v", m.MountPoints)
	}
}

// The race of CVE-2021-25741: a component checked as a directory is a symlink by the time
// it is opened. The component-wise O_NOFOLLOW open refuses it.
func TestOpenNoFollowRefusesSwappedComponent(t *testing.T) {
	vol := t.TempDir()
	outside := t.TempDir()
	os.Mkdir(filepath.Join(vol, "d"), 0o755)
	if fd, err := openNoFollow(vol, "d"); err != nil {
		t.Fatal(err)
	} else {
		closeFD(fd)
	}
	os.Remove(filepath.Join(vol, "d"))
	os.Symlink(outside, filepath.Join(vol, "d"))
	if _, err := openNoFollow(vol, "d"); err == nil {
		t.Fatal("opened through a swapped-in symlink")
	}
	if _, err := openNoFollow(vol, "d/x"); err == nil {
		t.Fatal("opened below a swapped-in symlink")
	}
}

func closeFD(fd int) { _ = unix.Close(fd) }

// A volume without a path on the node (an image volume's is "") or with a relative one
// would be resolved against the caller's working directory: refused before anything is
// made or mounted.
func TestPrepareRefusesAVolumeWithoutAnAbsolutePath(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	m := mount.NewFakeMounter(nil)
	targets := t.TempDir()
	for _, vol := range []string{"", "relative"} {
		if err := Prepare(m, vol, "made/here", filepath.Join(targets, "t"), false); err == nil {
			t.Errorf("volume path %q: no error", vol)
		}
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Errorf("made in the working directory: %v", entries)
	}
	if len(m.MountPoints) != 0 {
		t.Errorf("mounted %v", m.MountPoints)
	}
}
