package up

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

// TestMain keeps the kubevol binary, built once for the package, in a directory removed at
// the end. The package runs `kubevol up` itself, so it has no shared cluster.
func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "kubevol-up-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

func kubevolBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "kubevol")
	buildOnce.Do(func() { buildErr = framework.BuildKubevol(bin) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}
