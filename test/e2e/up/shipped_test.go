package up

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/build/kubevolimages"
	"github.com/kubevol/kubevol/internal/build/ociimage"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/upstatus"
)

// TestUpFromShippedControlPlane runs `kubevol up` as a release archive is used (docs/install.md):
// kubevol and kubevol-cluster side by side in a directory outside the source tree, run from
// there with no Go on PATH, an empty kubevol cache and no KUBEVOL_CLUSTER_BINARY. up must run
// the control plane beside it, say so, and never look for a source tree; its status file goes
// from ready to stopped; `kubevol verify` passes a case against it. A control plane of
// another release beside kubevol stops up at once, exit 1, saying so.
func TestUpFromShippedControlPlane(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kubevol up needs root (mounts); run the tests as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The control plane of this tree (built once for the whole run), and its release: the
	// archive's kubevol is stamped with the same, as make dist stamps both.
	cluster, err := localcluster.EnsureBinary(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, cluster, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", cluster, err)
	}
	release := strings.Fields(string(out))[1]

	archive := filepath.Join(t.TempDir(), "kubevol-"+release+"-linux-"+runtime.GOARCH)
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubevol := filepath.Join(archive, "kubevol")
	p := ociimage.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	if err := kubevolimages.GoBuild(ctx, root, p, release, kubevol); err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(archive, localcluster.ShippedName)
	linkOrCopy(t, cluster, shipped)

	work, home, cache := t.TempDir(), t.TempDir(), t.TempDir()
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, localcluster.CacheDirEnv + "=" + cache}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if _, err := os.Stat(filepath.Join(d, "go")); err == nil {
			// Then the empty cache and the absence of a build line below still show that
			// up never looked for a source tree.
			t.Logf("%s/go exists: the PATH of this up has a Go toolchain", d)
		}
	}
	dir := filepath.Join(work, "state")
	r := startUpWith(t, func(c *exec.Cmd) { c.Env, c.Dir = env, work }, kubevol,
		"--dir", dir, "--node-name", "shipped-e2e", "--status-interval", "500ms")
	pids := descendants(r.cmd.Process.Pid)
	log, _ := os.ReadFile(r.log)
	if want := "control plane: " + shipped + " (kubevol-cluster " + release + ", shipped beside kubevol)"; !strings.Contains(string(log), want) {
		t.Errorf("up's output does not say %q:\n%s", want, log)
	}
	if strings.Contains(string(log), "building") {
		t.Errorf("up built something:\n%s", log)
	}
	if entries, _ := os.ReadDir(cache); len(entries) > 0 {
		t.Errorf("up wrote to its cache (%d entries): it looked for a source tree or a cached build", len(entries))
	}
	if st, err := upstatus.Read(dir); err != nil || st.Phase != upstatus.Ready || st.PID != r.cmd.Process.Pid {
		t.Errorf("status file: %+v, %v; want ready, pid %d", st, err, r.cmd.Process.Pid)
	}

	verify := exec.CommandContext(ctx, kubevol, "verify", "--driver", "local.kubevol.io", "--dir", dir, "--only", "provision/immediate")
	verify.Env, verify.Dir = env, work
	if b, err := verify.CombinedOutput(); err != nil || !strings.Contains(string(b), "provision/immediate") {
		t.Errorf("kubevol verify: %v\n%s", err, b)
	}

	r.interrupt(t)
	assertNothingLeft(t, pids, dir)
	if st, err := upstatus.Read(dir); err != nil || st.Phase != upstatus.Stopped {
		t.Errorf("status file after SIGINT: %+v, %v; want stopped", st, err)
	}

	// Another release's control plane beside this kubevol: refused before anything starts.
	other := filepath.Join(t.TempDir(), "kubevol-other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	linkOrCopy(t, kubevol, filepath.Join(other, "kubevol"))
	fake := "#!/bin/sh\necho 'kubevol-cluster v0.0.0-other (Kubernetes v1.37.2, go, linux/" + runtime.GOARCH + ")'\n"
	if err := os.WriteFile(filepath.Join(other, localcluster.ShippedName), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	refused := exec.CommandContext(ctx, filepath.Join(other, "kubevol"), "up", "--dir", filepath.Join(work, "other"))
	refused.Env, refused.Dir = env, work
	b, err := refused.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("kubevol up beside another release's control plane: %v, want exit 1\n%s", err, b)
	}
	if want := "is the control plane of kubevol v0.0.0-other, and this kubevol is " + release; !strings.Contains(string(b), want) {
		t.Errorf("its output does not say %q:\n%s", want, b)
	}
}

// linkOrCopy puts src at dst: a hard link, or a copy across file systems.
func linkOrCopy(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.Link(src, dst); err == nil {
		return
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
