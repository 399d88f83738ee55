package atomicwriter

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestWriteUpdateRemove(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, map[string]FileProjection{
		"a":       {Data: []byte("1"), Mode: 0o644},
		"sub/b":   {Data: []byte("2"), Mode: 0o400},
		"sub/c/d": {Data: []byte("3"), Mode: 0o600},
	}, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(dir, "a"), "1")
	mustRead(t, filepath.Join(dir, "sub/b"), "2")
	mustRead(t, filepath.Join(dir, "sub/c/d"), "3")
	if target, _ := os.Readlink(filepath.Join(dir, "a")); target != "..data/a" {
		t.Errorf("a links to %q", target)
	}
	info, err := os.Stat(filepath.Join(dir, "sub/b"))
	if err != nil || info.Mode().Perm() != 0o400 {
		t.Errorf("sub/b mode %v, %v", info.Mode(), err)
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))

	// Unchanged payload: no new directory.
	if err := Write(dir, map[string]FileProjection{
		"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o400}, "sub/c/d": {Data: []byte("3"), Mode: 0o600},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(dir, "..data")); again != first {
		t.Errorf("unchanged payload rewrote the data dir: %s -> %s", first, again)
	}

	// Mode-only change is written; sub disappears with its link; the old ts dir goes.
	if err := Write(dir, map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o600}}, nil); err != nil {
		t.Fatal(err)
	}
	info, _ = os.Stat(filepath.Join(dir, "a"))
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode-only change not applied: %v", info.Mode())
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub still present: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("old data dir %s still present", first)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // a, ..data, ..<ts>
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("unexpected entries %v", names)
	}
}

func TestValidatePath(t *testing.T) {
	for _, bad := range []string{"", "/etc/passwd", "../x", "a/../../x", "..data", "..a", "a/..", strings.Repeat("x", 256)} {
		if ValidatePath(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
		dir := t.TempDir()
		if Write(dir, map[string]FileProjection{bad: {Data: []byte("x"), Mode: 0o644}}, nil) == nil {
			t.Errorf("Write accepted %q", bad)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("Write of %q left %d entries", bad, len(entries))
		}
	}
	for _, good := range []string{"a", "a/b", "a..b", "x/.y"} {
		if err := ValidatePath(good); err != nil {
			t.Errorf("%q rejected: %v", good, err)
		}
	}
}

// A reader never sees a mix of two payloads.
func TestWriteIsAtomicForReaders(t *testing.T) {
	dir := t.TempDir()
	payload := func(v string) map[string]FileProjection {
		return map[string]FileProjection{"x": {Data: []byte(v), Mode: 0o644}, "y": {Data: []byte(v), Mode: 0o644}}
	}
	if err := Write(dir, payload("0"), nil); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var torn atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			// Resolve ..data once, as a consumer that reads a consistent set does.
			ts, err := os.Readlink(filepath.Join(dir, "..data"))
			if err != nil {
				continue
			}
			x, err1 := os.ReadFile(filepath.Join(dir, ts, "x"))
			y, err2 := os.ReadFile(filepath.Join(dir, ts, "y"))
			if err1 == nil && err2 == nil && string(x) != string(y) {
				torn.Add(1)
			}
		}
	}()
	for i := 1; i < 200; i++ {
		if err := Write(dir, payload(strings.Repeat("v", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if torn.Load() > 0 {
		t.Fatalf("reader saw %d torn sets", torn.Load())
	}
}

func mustRead(t *testing.T, p, want string) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil || string(got) != want {
		t.Errorf("%s = %q, %v; want %q", p, got, err, want)
	}
}
