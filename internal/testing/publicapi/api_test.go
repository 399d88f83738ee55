package publicapi

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite pkg/api.txt from the packages")

// golden is the checked-in description of the public API, relative to the module root.
const golden = "pkg/api.txt"

// TestAPI compares the exported API of every pkg/ package with pkg/api.txt, so that no
// change to the public surface goes unnoticed in review, and checks that every exported
// declaration has a doc comment.
func TestAPI(t *testing.T) {
	var lines []string
	for _, p := range loadPkg(t) {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		if strings.Contains(p.PkgPath, "/internal/") {
			continue
		}
		lines = append(lines, Describe(p.Types)...)
		// Struct fields are left out: many are plain (NodeName) or share their
		// neighbour's comment (Workers and Parallelism).
		for _, u := range Undocumented(p.Fset, p.Syntax, false) {
			t.Errorf("no doc comment: %s", u)
		}
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("..", "..", "..", golden)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; create it with: go test ./internal/testing/publicapi -run TestAPI -update", err)
	}
	if d := lineDiff(string(want), got); d != "" {
		t.Errorf("the public API differs from %s (- file, + packages):\n%s\nIf the change is meant, regenerate it with: go test ./internal/testing/publicapi -run TestAPI -update", golden, d)
	}
}
