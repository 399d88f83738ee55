package atomicwriter

// Fuzz longer with, e.g.:
//
//	go test -run='^$' -fuzz='^FuzzCleanPath$' -fuzztime=5m ./pkg/volume/atomicwriter
//	go test -run='^$' -fuzz='^FuzzWrite$' -fuzztime=5m ./pkg/volume/atomicwriter
//
// The seeds below run as ordinary tests in `go test`.

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var hostilePaths = []string{
	"k", "a/b", "a/b/c", "./..data", "./..data/x", ".//..data", "./..data_tmp", "./..2026_01_02_15_04_05.x",
	"./..2026_01_02_15_04_05.x/f", "..data", "..data_tmp", "..foo", "./..foo", "..", "../x", "a/../b", "a/../../b",
	"/etc/passwd", ".", "./", "./.", "a//b", "a/./b", "a/", "x/..data", "a\x00b", "\xff\xfe", " ", "...",
	"./...", ".a", strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("d/", 2048) + "f", strings.Repeat("d/", 2047) + "ff",
}

// upstreamAccepts is the kubelet's check on a path as given (atomic_writer.go validatePath).
func upstreamAccepts(p string) bool {
	if p == "" || filepath.IsAbs(p) || len(p) > maxPath {
		return false
	}
	items := strings.Split(p, "/")
	for _, it := range items {
		if it == ".." || len(it) > maxFileName {
			return false
		}
	}
	return !(strings.HasPrefix(items[0], "..") && len(items[0]) > 2)
}

// cleanPath agrees with the kubelet on every path but those that clean to the volume
// itself or to one of the writer's names (and NUL, which no file name can hold), and what
// it accepts stays inside the volume.
func FuzzCleanPath(f *testing.F) {
	for _, p := range hostilePaths {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := cleanPath(p)
		if err != nil {
			if upstreamAccepts(p) {
				clean := filepath.Clean(p)
				first, _, _ := strings.Cut(clean, "/")
				if clean != "." && !isReserved(first) && !strings.ContainsRune(p, 0) {
					t.Fatalf("%q refused, upstream accepts it: %v", p, err)
				}
			}
			return
		}
		if !upstreamAccepts(p) {
			t.Fatalf("%q accepted as %q, upstream refuses it", p, c)
		}
		if c != filepath.Clean(p) || c == "." || filepath.IsAbs(c) {
			t.Fatalf("%q cleaned to %q", p, c)
		}
		if full := filepath.Join("/vol", c); !strings.HasPrefix(full, "/vol/") {
			t.Fatalf("%q escapes the volume: %s", p, full)
		}
		for _, e := range strings.Split(c, "/") {
			if e == ".." || e == "." || e == "" {
				t.Fatalf("%q cleaned to %q with element %q", p, c, e)
			}
		}
		if first, _, _ := strings.Cut(c, "/"); isReserved(first) {
			t.Fatalf("%q cleaned to the writer's name %q", p, c)
		}
	})
}

// payloadOf makes a payload of up to 8 files from newline-separated paths; contents and
// modes come from data.
func payloadOf(spec string, data []byte) map[string]FileProjection {
	out := map[string]FileProjection{}
	modes := []int32{0o644, 0o600, 0o400, 0o755, 0o444}
	for i, p := range strings.SplitN(spec, "\n", 8) {
		var d []byte
		if len(data) > 0 {
			d = bytes.Repeat(data[i%len(data):i%len(data)+1], i)
		}
		out[p] = FileProjection{Data: d, Mode: modes[i%len(modes)]}
	}
	return out
}

// Random payloads written into a volume, then another over it: nothing is ever written
// outside the volume, a refused payload changes nothing, the visible files are exactly
// the payload, every link resolves inside the volume (no loop), a repeated write is a
// no-op, and one data directory is left.
func FuzzWrite(f *testing.F) {
	for i, p := range hostilePaths {
		f.Add(p, []byte("v"), hostilePaths[(i+1)%len(hostilePaths)])
	}
	f.Add("a\na/b", []byte("x"), "a")
	f.Add("a\n./a", []byte("x"), "b")
	f.Add("k\n./..foo", []byte("xy"), "k")
	f.Add("a/b/c\na/d\ne", []byte("12"), "a/b\ne")
	f.Fuzz(func(t *testing.T, spec1 string, data []byte, spec2 string) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "vol")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sentinel := filepath.Join(parent, "sentinel")
		if err := os.WriteFile(sentinel, []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		prev := map[string]FileProjection(nil) // what the volume holds
		for _, spec := range []string{spec1, spec2} {
			payload := payloadOf(spec, data)
			before := snapshot(t, dir)
			err := Write(dir, payload, nil)
			checkOutside(t, parent)
			if err != nil {
				if after := snapshot(t, dir); after != before {
					t.Fatalf("refused payload %q changed the volume:\n%s\n->\n%s", spec, before, after)
				}
				if _, cerr := cleanPayload(payload); cerr == nil && !errors.Is(err, syscall.ENAMETOOLONG) {
					t.Fatalf("valid payload %q failed: %v", spec, err)
				}
				checkVisible(t, dir, prev)
				continue
			}
			clean, cerr := cleanPayload(payload)
			if cerr != nil {
				t.Fatalf("Write accepted %q, which cleanPayload refuses: %v", spec, cerr)
			}
			checkVisible(t, dir, clean)
			after := snapshot(t, dir)
			if err := Write(dir, payload, nil); err != nil {
				t.Fatalf("second write of %q: %v", spec, err)
			}
			if again := snapshot(t, dir); again != after {
				t.Fatalf("second write of %q was not a no-op:\n%s\n->\n%s", spec, after, again)
			}
			prev = clean
		}
	})
}

// checkOutside: the volume's parent holds only the volume and the untouched sentinel.
func checkOutside(t *testing.T, parent string) {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Name() != "sentinel" || entries[1].Name() != "vol" {
		t.Fatalf("written outside the volume: %v", entries)
	}
	if b, err := os.ReadFile(filepath.Join(parent, "sentinel")); err != nil || string(b) != "s" {
		t.Fatalf("sentinel changed: %q %v", b, err)
	}
}

// checkVisible: through the volume's visible names one sees exactly want; every link
// resolves inside the volume; at most one data directory exists.
func checkVisible(t *testing.T, dir string, want map[string]FileProjection) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	tsDirs := 0
	for _, e := range entries {
		name := e.Name()
		full := filepath.Join(dir, name)
		if e.Type()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(full)
			if err != nil {
				t.Fatalf("link %s does not resolve: %v", name, err)
			}
			realDir, _ := filepath.EvalSymlinks(dir)
			if !strings.HasPrefix(real, realDir+"/") {
				t.Fatalf("link %s resolves outside the volume: %s", name, real)
			}
		}
		switch {
		case name == dataDirName:
			continue
		case isTimestampDir(name):
			tsDirs++
			continue
		}
		real, err := filepath.EvalSymlinks(full)
		if err != nil {
			t.Fatalf("%s does not resolve: %v", name, err)
		}
		err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(real, p)
			rel = filepath.Join(name, rel)
			seen[rel] = true
			f, ok := want[rel]
			if !ok {
				return errors.New("unexpected file " + rel)
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			got, err := os.ReadFile(p)
			if err != nil || !d.Type().IsRegular() || !bytes.Equal(got, f.Data) || info.Mode().Perm() != os.FileMode(f.Mode).Perm() {
				return errors.New("wrong type, content or mode: " + rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if tsDirs > 1 {
		t.Fatalf("%d data directories left", tsDirs)
	}
	for p := range want {
		if !seen[p] {
			t.Fatalf("payload file %q not visible", p)
		}
	}
}

// snapshot lists every entry under dir with its type, link target, mode and content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + info.Mode().String())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			b.WriteString(" -> " + target)
		case d.Type().IsRegular():
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
