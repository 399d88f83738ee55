package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedBeside: the control plane is found beside kubevol, through a link to kubevol
// (one on $PATH), and not when it is missing or a directory.
func TestShippedBeside(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "kubevol-v1-linux-amd64")
	bin := t.TempDir()
	if err := os.MkdirAll(archive, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(archive, "kubevol")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(bin, "kubevol")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	if got := shippedBeside(exe); got != "" {
		t.Errorf("no kubevol-cluster yet, found %q", got)
	}
	cp := filepath.Join(archive, ShippedName)
	if err := os.Mkdir(cp, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shippedBeside(exe); got != "" {
		t.Errorf("a directory named kubevol-cluster was taken: %q", got)
	}
	if err := os.Remove(cp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{exe, link} {
		if got := shippedBeside(e); got != cp {
			t.Errorf("shippedBeside(%s) = %q, want %q", e, got, cp)
		}
	}
}

// TestCheckBinaryNotAProgram: a file that is no program of this machine (another
// architecture's) is named as such.
func TestCheckBinaryNotAProgram(t *testing.T) {
	p := filepath.Join(t.TempDir(), ShippedName)
	if err := os.WriteFile(p, []byte("\x7fELF\x02\x01\x01 not for this machine"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := CheckBinary(context.Background(), p, "v1")
	var be *BinaryError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "is not a program for this machine") {
		t.Fatalf("CheckBinary = %v, want a *BinaryError saying it is no program for this machine", err)
	}
}

func TestReportedVersion(t *testing.T) {
	for in, want := range map[string]string{
		"kubevol-cluster v0.2.0 (Kubernetes v1.37.2, go1.26.8, linux/amd64)\n": "v0.2.0",
		"kubevol-cluster devel (Kubernetes v1.37.2, go1.26.8, linux/arm64)":    "devel",
		"etcd Version: 3.7.0\n": "",
		"":                      "",
	} {
		if got := reportedVersion([]byte(in)); got != want {
			t.Errorf("reportedVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
