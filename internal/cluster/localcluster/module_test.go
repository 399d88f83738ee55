package localcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMainModuleCanBeDepended reads the main module's go.mod as a module that requires
// kubevol sees it: a dependency's replace lines are ignored, so the main module must need
// none, must not require k8s.io/kubernetes (which needs them) and must not require a staging
// module at v0.0.0 (which only a replace line makes resolvable). The control plane keeps
// those in its own module, whose go.mod and go.sum the binary's cache key covers.
func TestMainModuleCanBeDepended(t *testing.T) {
	root, err := FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "replace", strings.Contains(line, "=>"):
			t.Errorf("go.mod:%d: a replace line: %s", i+1, line)
		case strings.Contains(line, "k8s.io/kubernetes "):
			t.Errorf("go.mod:%d: requires k8s.io/kubernetes: %s", i+1, line)
		case len(f) >= 2 && f[1] == "v0.0.0":
			t.Errorf("go.mod:%d: a v0.0.0 requirement: %s", i+1, line)
		}
	}
	files, err := sourceFiles(root, clusterModule)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cmd/kubevol-cluster/go.mod", "cmd/kubevol-cluster/go.sum", "cmd/kubevol-cluster/main.go"} {
		if !slices.Contains(files, want) {
			t.Errorf("the binary's cache key ignores %s: it covers %v", want, files)
		}
	}
	// The kubelet links kubevol's volume manager; the tools built in the same module
	// (agnhost) do not, and must not be rebuilt, nor their running copies removed, at every
	// change of kubevol.
	withKubevol, err := sourceFiles(root, clusterModule, kubevolSources...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cmd/kubevol-cluster/kubeletvm/manager.go", "pkg/volumemanager/manager.go", "internal/cluster/kubeletoverlay/overlay.go", "go.sum"} {
		if !slices.Contains(withKubevol, want) {
			t.Errorf("the binary's cache key ignores %s", want)
		}
		if slices.Contains(files, want) {
			t.Errorf("the key of the module's other tools covers %s", want)
		}
	}
}
