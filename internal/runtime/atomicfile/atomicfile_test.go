package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(data) != "new" || st.Mode().Perm() != 0o600 {
		t.Errorf("content %q mode %o", data, st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want 1 (no temporary file left)", len(entries))
	}
	// A file whose temporary twin cannot be created is an error, not a direct write.
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("y"), 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
