package up

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/image"
	"github.com/kubevol/kubevol/internal/images"
	"github.com/kubevol/kubevol/internal/localcluster"
)

// imagesTag is the tag of the images this package builds: the overlay names them by it, and
// nothing can pull it, so a pod that runs one runs what the test imported.
const imagesTag = "e2e"

var (
	archiveOnce   sync.Once
	archivePath   string
	archiveBinary string
	archiveErr    error
)

// shippedImages builds, once for the package, the images of deploy/'s local stack for this
// machine's platform, as `make images` does (a static binary, hack/debs.sh's packages,
// internal/images), into one OCI archive for `kubevol up --image`, and returns it and the
// static binary in it. The Debian packages are cached in ~/.cache/kubevol/debs, so only the
// first run downloads them.
func shippedImages(t *testing.T) (archive, bin string) {
	t.Helper()
	archiveOnce.Do(func() { archivePath, archiveBinary, archiveErr = buildShippedImages(t) })
	if archiveErr != nil {
		t.Fatal(archiveErr)
	}
	return archivePath, archiveBinary
}

func buildShippedImages(t *testing.T) (string, string, error) {
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		return "", "", err
	}
	p := image.Platform{OS: "linux", Architecture: runtime.GOARCH}
	start := time.Now()
	bin := filepath.Join(binDir, "static", "kubevol")
	// Static, as `make build`, but without -trimpath: the compiled packages are then those
	// of the other e2e builds, already in the build cache (a -trimpath build of every
	// dependency takes over ten minutes on two cores).
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-s -w", "-o", bin, "./cmd/kubevol")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("static go build ./cmd/kubevol: %v\n%s", err, out)
	}
	built := time.Now()
	home, err := os.UserHomeDir()
	if err != nil {
		return "", "", err
	}
	debs := filepath.Join(home, ".cache", "kubevol", "debs", p.Architecture)
	if out, err := exec.Command(filepath.Join(root, "hack", "debs.sh"), p.Architecture, debs).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("hack/debs.sh: %v\n%s", err, out)
	}
	fetched := time.Now()
	b := &images.Builder{Prefix: images.DefaultPrefix, Tag: imagesTag, Version: imagesTag, Platforms: []image.Platform{p},
		Inputs: images.Inputs{
			Binary:   func(image.Platform) string { return bin },
			Tools:    func(image.Platform) string { return filepath.Join(debs, "root") },
			Packages: func(image.Platform) string { return filepath.Join(debs, "packages") },
		}}
	var named []image.Named
	for _, r := range images.Roles {
		if r.Name == "kubevol-node" { // deploy/node is optional and not part of deploy/
			continue
		}
		n, err := b.Build(r)
		if err != nil {
			return "", "", err
		}
		named = append(named, n)
	}
	archive := filepath.Join(binDir, "kubevol-images.oci.tar")
	if err := image.WriteArchiveFile(archive, named...); err != nil {
		return "", "", err
	}
	t.Logf("images: static binary %s, Debian packages %s, %d images archived %s",
		built.Sub(start).Round(100*time.Millisecond), fetched.Sub(built).Round(100*time.Millisecond),
		len(named), time.Since(fetched).Round(100*time.Millisecond))
	return archive, bin, nil
}
