package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// ShippedName is the control plane's file name in a release archive, beside kubevol
// (`make dist`, docs/install.md).
const ShippedName = "kubevol-cluster"

// shippedBinary returns the kubevol-cluster beside the running executable, as a release
// archive lays them out, or "" when there is none.
func shippedBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return shippedBeside(exe)
}

// shippedBeside is the kubevol-cluster beside the executable exe, or "".
func shippedBeside(exe string) string {
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved // a link to kubevol on $PATH finds the archive's directory
	}
	p := filepath.Join(filepath.Dir(exe), ShippedName)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// BinaryError is a control-plane binary that kubevol will not run: missing, not a program
// of this machine, or of another kubevol release.
type BinaryError struct {
	Path string
	Err  error
}

func (e *BinaryError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *BinaryError) Unwrap() error { return e.Err }

// CheckBinary runs `bin version` and returns the kubevol release it reports, or a
// *BinaryError unless that is want. kubevol runs only a control plane of its own release:
// the kubelet of `kubevol up --runtime containerd` links this release's volume manager
// (cmd/kubevol-cluster/kubeletvm), and a control plane of another one would mix releases
// without saying so. An exact match of the version strings, both stamped by the same
// `make dist` (or `make build`) from internal/runtime/version, is the rule; $KUBEVOL_CLUSTER_BINARY
// is the way to run another one anyway.
func CheckBinary(ctx context.Context, bin, want string) (string, error) {
	fail := func(format string, args ...any) (string, error) {
		return "", &BinaryError{Path: bin, Err: fmt.Errorf(format, args...)}
	}
	st, err := os.Stat(bin)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fail("no such file")
	case err != nil:
		return fail("%v", err)
	case st.IsDir():
		return fail("is a directory, not the kubevol-cluster binary")
	case st.Mode()&0o111 == 0:
		return fail("is not executable (chmod +x, or extract the release archive with tar)")
	}
	// A cold start of a binary of this size, on a loaded machine, takes seconds.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if errors.Is(err, syscall.ENOEXEC) {
		return fail("is not a program for this machine (%s/%s): take the archive of this architecture", runtime.GOOS, runtime.GOARCH)
	}
	got := reportedVersion(out)
	if err != nil || got == "" {
		return fail("does not report its kubevol release (`%s version`: %s): not a kubevol-cluster of kubevol %s", filepath.Base(bin), describeRun(err, out), want)
	}
	if got != want {
		return fail("is the control plane of kubevol %s, and this kubevol is %s: use the kubevol-cluster of the same release archive (or set %s to run it anyway)", got, want, BinaryEnv)
	}
	return got, nil
}

// reportedVersion is the release in kubevol-cluster's version line,
// "kubevol-cluster v0.2.0 (Kubernetes v1.37.2, go1.26.8, linux/amd64)".
func reportedVersion(out []byte) string {
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != ShippedName {
		return ""
	}
	return f[1]
}

func describeRun(err error, out []byte) string {
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if msg := strings.TrimSpace(string(ee.Stderr)); msg != "" {
			return firstLine(msg)
		}
		return err.Error()
	case err != nil:
		return err.Error()
	}
	return fmt.Sprintf("printed %q", firstLine(string(out)))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// errNoBinary is EnsureBinary's error outside a source tree with nothing to run.
func errNoBinary() error {
	where := "the kubevol executable"
	if exe, err := os.Executable(); err == nil {
		where = filepath.Dir(exe)
	}
	return fmt.Errorf("no control-plane binary: no %s beside kubevol in %s, --cluster-binary not given, %s not set, and not in a kubevol source tree to build one from; use a release archive's kubevol with its kubevol-cluster (docs/install.md), or run from the kubevol source tree", ShippedName, where, BinaryEnv)
}

// BuildRelease builds the control plane of the source tree at root into out, to ship it:
// with env added to the environment (GOOS, GOARCH, CGO_ENABLED of the target platform) and
// the go build flags given (the shipped binaries' flags, internal/build/kubevolimages.GoBuildFlags, whose
// -ldflags must include UpstreamLDFlags), through the kubelet's overlay as EnsureBinary
// builds it. Nothing is cached beyond Go's build cache.
func BuildRelease(ctx context.Context, root, out string, env, flags []string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	if !strings.Contains(strings.Join(flags, " "), UpstreamLDFlags) {
		return errors.New("BuildRelease: the flags' -ldflags lack UpstreamLDFlags")
	}
	// go build runs in the control plane's module: out must not be relative to elsewhere.
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	fmt.Fprintf(progress, "building kubevol-cluster (Kubernetes %s) into %s [%s]\n", UpstreamVersion, out, strings.Join(env, " "))
	overlay, err := KubeletOverlay(root)
	if err != nil {
		return fmt.Errorf("the kubelet's build overlay: %w", err)
	}
	return build(ctx, filepath.Join(root, clusterModule), out, env, append(overlay.Flags(), flags...), progress)
}
