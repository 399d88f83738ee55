package framework

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// FiguresEnv names the file where Figure appends its lines; make test (hack/test.sh) sets
// it and prints the file at the end, since go test shows nothing of a passing test.
const FiguresEnv = "KUBEVOL_TEST_FIGURES"

var figuresMu sync.Mutex

// Figure logs a measurement of the test and, when FiguresEnv names a file, appends it there
// with the test's name. Figures are printed, never asserted: the machines are noisy.
func Figure(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv(FiguresEnv)
	if path == "" {
		return
	}
	figuresMu.Lock()
	defer figuresMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("figures: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s: %s\n", t.Name(), line)
}
