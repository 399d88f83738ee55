package backend

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The sleeps separate the files' ctimes, which the kernel stamps with its own coarse clock,
// from the times compared with them: they wait for no result.
func TestChangedSince(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "d", "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	t0 := time.Now()
	if ch, err := ChangedSince(dir, t0); err != nil || ch {
		t.Fatalf("untouched tree: changed=%v err=%v", ch, err)
	}
	time.Sleep(20 * time.Millisecond)
	// A write in place changes the file's ctime; a removal changes its directory's.
	if err := os.WriteFile(f, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ch, _ := ChangedSince(dir, t0); !ch {
		t.Fatal("a write after t0 was not seen")
	}
	t1 := time.Now().Add(20 * time.Millisecond)
	time.Sleep(40 * time.Millisecond)
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if ch, _ := ChangedSince(dir, t1); !ch {
		t.Fatal("a removal after t1 was not seen")
	}
}
