package atomicwriter_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubevol/kubevol/pkg/volume/atomicwriter"
)

// Write publishes a whole set of files at once; a second Write replaces the set, and a
// reader that resolves ..data once never sees a mix of the two.
func ExampleWrite() {
	dir, _ := os.MkdirTemp("", "atomicwriter-example-")
	defer os.RemoveAll(dir)

	_ = atomicwriter.Write(dir, map[string]atomicwriter.FileProjection{
		"greeting":    {Data: []byte("hello"), Mode: 0o644},
		"nested/name": {Data: []byte("world"), Mode: 0o644},
	}, nil)
	_ = atomicwriter.Write(dir, map[string]atomicwriter.FileProjection{
		"greeting": {Data: []byte("hello again"), Mode: 0o644},
	}, nil)

	data, _ := os.ReadFile(filepath.Join(dir, "greeting"))
	link, _ := os.Readlink(filepath.Join(dir, "greeting"))
	_, err := os.Stat(filepath.Join(dir, "nested"))
	fmt.Printf("%s (through %s); nested removed: %v\n", data, link, os.IsNotExist(err))
	// Output: hello again (through ..data/greeting); nested removed: true
}
