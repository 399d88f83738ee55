package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The deployable binary must not link the control plane, which lives in kubevol-cluster.
const maxBinaryBytes = 80 << 20

// releaseFlags are the flags of the deployable build (`make build`): without DWARF and the
// symbol table, as upstream Kubernetes ships its binaries.
var releaseFlags = []string{"-ldflags=-s -w"}

func TestBinaryStaysSmallAndFreeOfTheControlPlane(t *testing.T) {
	out := filepath.Join(t.TempDir(), "kubevol")
	build := exec.Command("go", append(append([]string{"build"}, releaseFlags...), "-o", out, ".")...)
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubevol release binary: %.1f MiB", float64(st.Size())/(1<<20))
	if v, err := exec.Command(out, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(v), "kubevol ") {
		t.Errorf("kubevol version: %v: %s", err, v)
	}
	if st.Size() > maxBinaryBytes {
		t.Errorf("kubevol binary is %d bytes, over the %d limit", st.Size(), maxBinaryBytes)
	}

	deps, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(deps)) {
		for _, banned := range []string{"k8s.io/kubernetes/cmd/", "go.etcd.io/etcd/server/", "k8s.io/apiserver/pkg/server"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("kubevol links %s; control-plane code belongs in cmd/kubevol-cluster", pkg)
			}
		}
		// Test helpers stay out of the product (their flags and init would come along).
		if pkg == "testing" || strings.HasSuffix(pkg, "/csitest") || strings.HasSuffix(pkg, "/drivertest") {
			t.Errorf("kubevol links the test helper %s", pkg)
		}
	}
}
