package up

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/build/kubevolimages"
	"github.com/kubevol/kubevol/internal/build/ociimage"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

// imagesTag is the tag of the images this package builds: the overlay names them by it, and
// nothing can pull it, so a pod that runs one runs what the test imported.
const imagesTag = "e2e"

var (
	archiveOnce   sync.Once
	archivePath   string
	archiveBinary string
	archiveImages []ociimage.Named
	archiveErr    error
	debsOnce      sync.Once
	debsErr       error
)

// shippedImages builds, once for the package, the images of deploy/'s local stack for this
// machine's platform, as `make images` does (buildImages), into one OCI archive for `kubevol
// up --image`, and returns it and the static binary in it.
func shippedImages(t *testing.T) (archive, bin string) {
	t.Helper()
	archiveOnce.Do(func() {
		archiveImages, archiveBinary, archiveErr = buildImages(t, filepath.Join(binDir, "static"))
		if archiveErr != nil {
			return
		}
		archivePath = filepath.Join(binDir, "kubevol-images.oci.tar")
		archiveErr = ociimage.WriteArchiveFile(archivePath, archiveImages...)
	})
	if archiveErr != nil {
		t.Fatal(archiveErr)
	}
	return archivePath, archiveBinary
}

// buildImages builds into dir the images of deploy/'s local stack (every role but the
// optional node agent) for this machine's platform through exactly `make images`' path:
// the static binary by kubevolimages.GoBuild (hack/images' flags), the Debian packages by
// hack/debs.sh (once per package, cached in ~/.cache/kubevol/debs, so only the first run
// downloads them),
// the images by kubevolimages.Builder. It returns the images and the binary.
func buildImages(t *testing.T, dir string) ([]ociimage.Named, string, error) {
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		return nil, "", err
	}
	p := ociimage.Platform{OS: "linux", Architecture: runtime.GOARCH}
	start := time.Now()
	bin := filepath.Join(dir, "kubevol")
	if err := kubevolimages.GoBuild(context.Background(), root, p, imagesTag, bin); err != nil {
		return nil, "", err
	}
	built := time.Now()
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, "", err
	}
	debs := filepath.Join(home, ".cache", "kubevol", "debs", p.Architecture)
	// Once per package: its apt-cache calls take seconds even when nothing changed.
	debsOnce.Do(func() {
		if out, err := exec.Command(filepath.Join(root, "hack", "debs.sh"), p.Architecture, debs).CombinedOutput(); err != nil {
			debsErr = fmt.Errorf("hack/debs.sh: %v\n%s", err, out)
		}
	})
	if debsErr != nil {
		return nil, "", debsErr
	}
	fetched := time.Now()
	b := &kubevolimages.Builder{Prefix: kubevolimages.DefaultPrefix, Tag: imagesTag, Version: imagesTag, Platforms: []ociimage.Platform{p},
		Inputs: kubevolimages.Inputs{
			Binary:   func(ociimage.Platform) string { return bin },
			Tools:    func(ociimage.Platform) string { return filepath.Join(debs, "root") },
			Packages: func(ociimage.Platform) string { return filepath.Join(debs, "packages") },
		}}
	var named []ociimage.Named
	for _, r := range kubevolimages.Roles {
		if r.Name == "kubevol-node" { // deploy/node is optional and not part of deploy/
			continue
		}
		n, err := b.Build(r)
		if err != nil {
			return nil, "", err
		}
		named = append(named, n)
	}
	t.Logf("images in %s: static binary %s, Debian packages %s, %d images %s", dir,
		built.Sub(start).Round(100*time.Millisecond), fetched.Sub(built).Round(100*time.Millisecond),
		len(named), time.Since(fetched).Round(100*time.Millisecond))
	return named, bin, nil
}

// Same source, same digests: a second build of this platform's images from the same tree,
// through `make images`' path, gives a byte-identical binary and the same digest for every
// image. (The module cache and the build cache are warm by then: only the link runs again.)
func TestImagesReproducible(t *testing.T) {
	shippedImages(t)
	second, bin, err := buildImages(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if a, b := fileDigest(t, archiveBinary), fileDigest(t, bin); a != b {
		t.Errorf("the static binary differs between two builds: %s and %s", a, b)
	}
	if len(second) != len(archiveImages) {
		t.Fatalf("%d images, then %d", len(archiveImages), len(second))
	}
	for i, n := range second {
		first, err := archiveImages[i].Index.Digest()
		if err != nil {
			t.Fatal(err)
		}
		again, err := n.Index.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if n.Ref != archiveImages[i].Ref || first != again {
			t.Errorf("%s@%s, then %s@%s", archiveImages[i].Ref, first, n.Ref, again)
		}
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}
