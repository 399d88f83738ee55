package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubevol/kubevol/internal/runtime/version"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

// TestUpDriverFlags: a --driver or --driver-config that cannot work exits 2 with one line
// naming it, before anything starts.
func TestUpDriverFlags(t *testing.T) {
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("a.example.com:\n  atachRequired: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := csitest.Start(t, &csitest.Driver{Name: "Bad_Name"})
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"not unix", []string{"--driver", "tcp://127.0.0.1:1"}, `--driver "tcp://127.0.0.1:1": want unix:///path/csi.sock`},
		{"relative", []string{"--driver", "unix://csi.sock"}, "want unix:///path/csi.sock"},
		{"missing config", []string{"--driver-config", filepath.Join(dir, "none.yaml")}, "--driver-config: open"},
		{"misspelt config", []string{"--driver-config", badConfig}, `unknown field "atachRequired"`},
		{"invalid driver name", []string{"--driver", bad.Address}, "--driver " + bad.Address + `: GetPluginInfo returned the invalid driver name "Bad_Name"`},
		{"no nodes", []string{"--nodes", "0"}, "--nodes 0: want at least 1"},
		{"nodes of the kubelet", []string{"--nodes", "2", "--runtime", "containerd"}, "--nodes 2 needs the kubevol node agent"},
		{"unknown sidecar", []string{"--sidecars", "attacher,snapshot-controller"}, "--sidecars: unknown sidecar \"snapshot-controller\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"up", "--dir", filepath.Join(dir, "up")}, tc.args...)
			if code := Execute(args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.wantErr) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.wantErr)
			}
		})
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "up")); len(entries) > 0 {
		t.Errorf("a refused --driver left %d entries in the state directory", len(entries))
	}
}

// TestUpRuntimeMissingPackage: --runtime containerd on a machine without containerd stops at
// once with one line naming the package, exit 2, and writes nothing.
func TestUpRuntimeMissingPackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no containerd, ctr or runc on it
	dir := filepath.Join(t.TempDir(), "up")
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"up", "--dir", dir, "--runtime", "containerd"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
	}
	want := "--runtime containerd needs containerd: install the Debian package containerd"
	if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, want) {
		t.Errorf("first stderr line %q does not contain %q", first, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("a missing package left %d entries in the state directory", len(entries))
	}
}

// TestUpClusterBinaryFlag: a --cluster-binary that is missing, not a program, or of another
// kubevol release exits 2 with one line saying so, before anything starts; one of this
// release is taken as is (--build-only prints it).
func TestUpClusterBinaryFlag(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, script string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	this := fake("this", `echo "kubevol-cluster `+version.Get()+` (Kubernetes v1.37.2, go, linux/amd64)"`, 0o755)
	for _, tc := range []struct {
		name, bin, wantErr string
	}{
		{"missing", filepath.Join(dir, "none"), "--cluster-binary " + filepath.Join(dir, "none") + ": no such file"},
		{"directory", dir, "is a directory"},
		{"not executable", fake("plain", "true", 0o644), "is not executable"},
		{"no version", fake("old", `echo 'kubevol-cluster: unknown component "version"' >&2; exit 2`, 0o755), `does not report its kubevol release (` + "`old version`" + `: kubevol-cluster: unknown component "version")`},
		{"another release", fake("other", `echo "kubevol-cluster v0.0.1-other (Kubernetes v1.37.2, go, linux/amd64)"`, 0o755), "is the control plane of kubevol v0.0.1-other, and this kubevol is " + version.Get()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := []string{"up", "--dir", filepath.Join(dir, "up"), "--cluster-binary", tc.bin}
			if code := Execute(args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.wantErr) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "up")); err == nil {
		t.Error("a refused --cluster-binary made the state directory")
	}
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"up", "--build-only", "--cluster-binary", this}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit code = %d; stderr:\n%s", code, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != this {
		t.Errorf("--build-only printed %q, want %q", got, this)
	}
}
