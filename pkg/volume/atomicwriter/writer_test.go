package atomicwriter

import (
	"os"
	"path/filepath"
	"sort"
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

// Hostile and odd paths: the kubelet's checks on the path as given, then ours on the
// cleaned path.
func TestCleanPath(t *testing.T) {
	refused := []string{
		"", "/etc/passwd", "..", "../x", "a/../../x", "a/../b", "a/..", // upstream: absolute, ".." element
		"..data", "..a", "..data/x", // upstream: first element starts with ".."
		"./..data", "./..data/x", ".//..data", "./..data_tmp", "./..2026_01_02_15_04_05.abc", "./..2026_01_02_15_04_05.abc/f", // ours: cleaned to a writer's name
		".", "./", "./.", // ours: the volume directory itself
		"a\x00b",
		strings.Repeat("x", 256), strings.Repeat("a/", 2049),
	}
	for _, p := range refused {
		if c, err := cleanPath(p); err == nil {
			t.Errorf("%q accepted as %q", p, c)
		} else if p == "./..data" && !strings.Contains(err.Error(), `"./..data"`) {
			t.Errorf("error does not name the path: %v", err)
		}
	}
	accepted := map[string]string{
		"a": "a", "a/b": "a/b", "a..b": "a..b", "x/.y": "x/.y", ".a": ".a",
		"./..foo": "..foo", "./..datax": "..datax", "./..2026": "..2026", // upstream publishes these as "..foo" etc.
		"x/..data": "x/..data", "a/./b": "a/b", "a//b": "a/b", "a/": "a", "./a": "a",
		strings.Repeat("x", 255): strings.Repeat("x", 255),
	}
	for p, want := range accepted {
		if c, err := cleanPath(p); err != nil || c != want {
			t.Errorf("%q: %q, %v; want %q", p, c, err, want)
		}
	}
}

// A payload path that cleans to the writer's own name is refused, nothing changes, the
// volume keeps working (on main, "./..data" made ..data a link to itself and every later
// Write failed).
func TestWriteRefusesReservedNames(t *testing.T) {
	for _, bad := range []string{"./..data", "./..data/x", "./..data_tmp", "./..2026_01_02_15_04_05.abc", "./"} {
		t.Run(bad, func(t *testing.T) {
			dir := t.TempDir()
			good := map[string]FileProjection{"k": {Data: []byte("1"), Mode: 0o644}}
			if err := Write(dir, good, nil); err != nil {
				t.Fatal(err)
			}
			before := listDir(t, dir)
			err := Write(dir, map[string]FileProjection{"k": {Data: []byte("2"), Mode: 0o644}, bad: {Data: []byte("x"), Mode: 0o644}}, nil)
			if err == nil || !strings.Contains(err.Error(), bad) {
				t.Fatalf("Write: %v", err)
			}
			if after := listDir(t, dir); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Errorf("refused Write changed the dir: %v -> %v", before, after)
			}
			mustRead(t, filepath.Join(dir, "k"), "1")
			if err := Write(dir, map[string]FileProjection{"k": {Data: []byte("3"), Mode: 0o644}}, nil); err != nil {
				t.Fatalf("later Write: %v", err)
			}
			mustRead(t, filepath.Join(dir, "k"), "3")
		})
	}
}

// "./..foo" is published as "..foo", as upstream, and its link goes with it.
func TestWriteDotDotName(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, map[string]FileProjection{"./..foo": {Data: []byte("1"), Mode: 0o644}, "a": {Data: []byte("2"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(dir, "..foo"), "1")
	if target, _ := os.Readlink(filepath.Join(dir, "..foo")); target != "..data/..foo" {
		t.Errorf("..foo links to %q", target)
	}
	if err := Write(dir, map[string]FileProjection{"a": {Data: []byte("2"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "..foo")); !os.IsNotExist(err) {
		t.Errorf("stale ..foo link kept: %v", err)
	}
}

func TestWriteRefusesCollisions(t *testing.T) {
	for _, payload := range []map[string]FileProjection{
		{"a": {Data: []byte("1")}, "./a": {Data: []byte("2")}},
		{"a/b": {Data: []byte("1")}, "a//b": {Data: []byte("2")}},
		{"a": {Data: []byte("1")}, "a/b/c": {Data: []byte("2")}},
	} {
		dir := t.TempDir()
		if err := Write(dir, payload, nil); err == nil {
			t.Errorf("%v accepted", payload)
		} else if entries := listDir(t, dir); len(entries) != 0 {
			t.Errorf("refused Write left %v", entries)
		}
	}
}

// Timestamped directories that ..data does not point to are removed on every Write, an
// unchanged one included; anything else is left alone.
func TestWriteSweepsOrphans(t *testing.T) {
	dir := t.TempDir()
	payload := map[string]FileProjection{"k": {Data: []byte("1"), Mode: 0o644}}
	if err := Write(dir, payload, nil); err != nil {
		t.Fatal(err)
	}
	current, _ := os.Readlink(filepath.Join(dir, "..data"))
	orphans := []string{"..2020_01_01_00_00_00.123", "..2020_01_01_00_00_01.x7/sub"}
	for _, o := range orphans {
		if err := os.MkdirAll(filepath.Join(dir, o), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, o, "f"), nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// Not a timestamped directory: kept.
	for _, keep := range []string{"..foo", "..2020_01_01"} {
		if err := os.Mkdir(filepath.Join(dir, keep), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(dir, payload, nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listDir(t, dir), ",")
	want := []string{current, "..2020_01_01", "..data", "..foo", "k"}
	sort.Strings(want)
	if got != strings.Join(want, ",") {
		t.Errorf("entries %s, want %v", got, want)
	}
}

// A volume damaged by the old writer (..data a link into itself) is repaired by the next
// valid Write.
func TestWriteRepairsLoopedDataLink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("..data/..data", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, map[string]FileProjection{"k": {Data: []byte("1"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(dir, "k"), "1")
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
