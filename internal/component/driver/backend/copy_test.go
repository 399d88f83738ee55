package backend

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

func TestCopySparseFileKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 32<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := copySparseFile(src, dst, 128<<20); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Size() != 128<<20 {
		t.Fatalf("dst size %v, %v", fi, err)
	}
	if alloc, _ := AllocatedBytes(dst); alloc > 1<<20 {
		t.Errorf("copy allocates %d bytes: holes were filled", alloc)
	}
	got := make([]byte, 5)
	g, _ := os.Open(dst)
	defer g.Close()
	if _, err := g.ReadAt(got, 32<<20); err != nil || !bytes.Equal(got, []byte("hello")) {
		t.Errorf("data at 32 MiB: %q, %v", got, err)
	}
}

func TestDirBackendSnapshotAndRestore(t *testing.T) {
	root := t.TempDir()
	l := Layout{Volumes: filepath.Join(root, "volumes"), Snapshots: filepath.Join(root, "snapshots")}
	if err := l.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	b, _ := New(state.TypeDir, l)
	if err := b.CreateVolume("v1", 0, ""); err != nil {
		t.Fatal(err)
	}
	v1 := b.VolumePath("v1")
	if err := os.MkdirAll(filepath.Join(v1, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v1, "sub", "f"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/f", filepath.Join(v1, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSnapshot("v1", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateVolume("v2", 0, b.SnapshotPath("s1")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(b.VolumePath("v2"), "link"))
	if err != nil || string(got) != "data" {
		t.Errorf("restored volume: %q, %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Join(b.VolumePath("v2"), "sub", "f")); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode not kept: %v", fi)
	}
	entries, err := Scan(l.Volumes)
	if err != nil || len(entries) != 2 {
		t.Errorf("Scan: %+v, %v", entries, err)
	}
	if typ, _ := Probe(l, "v2"); typ != state.TypeDir {
		t.Errorf("Probe(v2) = %q", typ)
	}
	if typ, _ := Probe(l, "../etc"); typ != "" {
		t.Errorf("Probe accepted a path outside the layout: %q", typ)
	}
}
