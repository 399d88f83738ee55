package kubevolimages

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// versionVar is the variable the version is stamped into.
const versionVar = "github.com/kubevol/kubevol/internal/runtime/version.Version"

// GoBuildFlags are the flags of `go build` for every shipped binary: `make build`,
// `make binaries`, `make images` (all through hack/images) and the images tests use them,
// and nothing else defines them. Static and reproducible, as upstream ships its sidecars:
// no paths of this machine (-trimpath), no VCS stamp and no build ID, no DWARF or symbol
// table; the version is the only input beside the source. The same source gives the same
// binary, so the same image digests. ldflags are added to the -ldflags: the control plane
// of a release archive (`make dist`) is built with these flags and its upstream version
// stamp (internal/cluster/localcluster.UpstreamLDFlags).
func GoBuildFlags(version string, ldflags ...string) []string {
	ld := strings.Join(append([]string{"-s -w -buildid= -X " + versionVar + "=" + version}, ldflags...), " ")
	return []string{"-trimpath", "-buildvcs=false", "-ldflags", ld}
}

// GoBuildEnv is the environment GoBuild adds for platform p: no cgo (a static binary), the
// platform's GOOS and GOARCH.
func GoBuildEnv(p ociimage.Platform) []string {
	return []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}
}

// GoBuild builds cmd/kubevol of the module at root for platform p, stamped with version,
// into out, with GoBuildFlags and GoBuildEnv.
func GoBuild(ctx context.Context, root string, p ociimage.Platform, version, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := append([]string{"build"}, GoBuildFlags(version)...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, "./cmd/kubevol")...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), GoBuildEnv(p)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/kubevol for %s: %v\n%s", p, err, b)
	}
	return nil
}
