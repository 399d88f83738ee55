package localcluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/kubeletoverlay"
	"github.com/kubevol/kubevol/internal/runtime/filelock"
	"github.com/kubevol/kubevol/internal/runtime/version"
)

const (
	modulePath = "github.com/kubevol/kubevol"
	// clusterModule is the control plane's own module, relative to the source tree: it
	// links k8s.io/kubernetes, whose replace lines must stay out of the main module.
	clusterModule = "cmd/kubevol-cluster"
	// BinaryEnv names an explicit kubevol-cluster binary, which is then used as is.
	BinaryEnv = "KUBEVOL_CLUSTER_BINARY"
	// CacheDirEnv overrides where built binaries are kept (default: the user cache dir).
	CacheDirEnv = "KUBEVOL_CACHE_DIR"
	// UpstreamVersion is the Kubernetes release the control plane is built from (unless
	// VersionEnv picks another).
	UpstreamVersion = "v1.37.2"
)

// UpstreamLDFlags stamps the pinned release into the control plane (ldFlags). Every build
// of it links with them (BuildRelease's callers add them to the shipped binaries' -ldflags).
var UpstreamLDFlags = ldFlags(UpstreamVersion)

// EnsureBinary returns the path of a kubevol-cluster binary, the first of: the one
// $KUBEVOL_CLUSTER_BINARY names (as is); the one shipped beside the running executable (a
// release archive's, checked to be of this kubevol's version); one that matches this source
// tree, built through the Go build cache when none exists for the go.mod, go.sum and sources
// of the cmd/kubevol-cluster module, and only then; outside a source tree, the last one
// built. Concurrent callers (parallel test packages, `kubevol up`) wait for a single build.
// Progress goes to progress.
func EnsureBinary(ctx context.Context, progress io.Writer) (string, error) {
	return ensureBinary(ctx, progress, nil)
}

// ensureBinary is EnsureBinary; building, if set, is told when a build starts (true) and
// ends (false).
func ensureBinary(ctx context.Context, progress io.Writer, building func(bool)) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, p, err)
		}
		return p, nil
	}
	release := Version()
	// A release archive ships the pinned release's control plane only.
	if p := shippedBinary(); p != "" && release == UpstreamVersion {
		v, err := CheckBinary(ctx, p, version.Get())
		if err != nil {
			return "", err
		}
		fmt.Fprintf(progress, "control plane: %s (kubevol-cluster %s, shipped beside kubevol)\n", p, v)
		return p, nil
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	root, err := FindModuleRoot()
	if err != nil {
		// Outside the source tree (a kubevol moved away from its archive's control plane),
		// the last built binary will do.
		prefix := "kubevol-cluster-"
		if release != UpstreamVersion {
			prefix = "control-plane-" + release + "-"
		}
		if bin := newestEntry(cache, prefix); bin != "" {
			fmt.Fprintf(progress, "control plane: %s (the last one built on this machine)\n", bin)
			return bin, nil
		}
		return "", errNoBinary()
	}
	if release != UpstreamVersion {
		return ensureReleaseBinary(ctx, root, cache, release, progress, building)
	}
	// The kubelet links kubevol's volume manager: the kubevol sources are part of its key.
	key, err := sourceKey(root, clusterModule, UpstreamLDFlags, kubevolSources...)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "kubevol-cluster-"+key)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}

	err = buildLocked(filepath.Join(cache, "build.lock"), bin, func() error {
		if building != nil {
			building(true)
			defer building(false)
		}
		overlay, err := KubeletOverlay(root)
		if err != nil {
			return fmt.Errorf("the kubelet's build overlay: %w", err)
		}
		fmt.Fprintf(progress, "building kube-apiserver %s, etcd, kube-controller-manager, kube-scheduler and kubelet into %s (first run only; about 12 minutes cold on two cores)\n", UpstreamVersion, bin)
		// The environment is left as is: the same settings as `go test` share the build cache.
		flags := append(overlay.Flags(), "-ldflags", UpstreamLDFlags)
		if err := build(ctx, filepath.Join(root, clusterModule), bin, nil, flags, progress); err != nil {
			return err
		}
		removeStale(cache, "kubevol-cluster-", bin)
		return nil
	})
	if err != nil {
		return "", err
	}
	return bin, nil
}

// buildLocked runs build under an exclusive lock on lockPath unless out exists once the
// lock is held (another process built it while this one waited).
func buildLocked(lockPath, out string, build func() error) error {
	return filelock.With(lockPath, 0o644, func() error {
		if _, err := os.Stat(out); err == nil {
			return nil
		}
		return build()
	})
}

// FindModuleRoot walks up from the working directory, then from the running executable,
// to the kubevol module root.
func FindModuleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && strings.HasPrefix(strings.TrimSpace(string(data)), "module "+modulePath+"\n") {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("kubevol-cluster binary not found: set %s, or run from the kubevol source tree so it can be built", BinaryEnv)
}

// sourceKey fingerprints everything that decides the content of what is built from module
// (relative to root): the Go version, salt (build flags) and the module's files.
func sourceKey(root, module, salt string, extra ...string) (string, error) {
	files, err := sourceFiles(root, module, extra...)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("the Go toolchain is needed to build %s: %w", module, err)
	}
	h.Write(goVersion)
	h.Write([]byte(salt))
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// kubevolSources are what kubevol-cluster's kubelet links of the kubevol module besides its
// own module: the main module's go.mod and go.sum, and pkg/ and internal/ (the overlay's
// generator among them).
var kubevolSources = []string{"go.mod", "go.sum", filepath.Join(clusterModule, "kubeletvm"), "pkg", "internal"}

// sourceFiles lists, relative to root, the files a module's binaries are built from: its
// go.mod, go.sum and top-level sources, then the extra files and the sources under the
// extra directories.
func sourceFiles(root, module string, extra ...string) ([]string, error) {
	files := []string{filepath.Join(module, "go.mod"), filepath.Join(module, "go.sum")}
	srcs, err := filepath.Glob(filepath.Join(root, module, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(srcs)
	for _, s := range srcs {
		rel, _ := filepath.Rel(root, s)
		files = append(files, rel)
	}
	var dirs []string
	for _, e := range extra {
		if st, err := os.Stat(filepath.Join(root, e)); err == nil && !st.IsDir() {
			files = append(files, e)
		} else {
			dirs = append(dirs, e)
		}
	}
	fixed := len(files)
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files[fixed:])
	return files, nil
}

// KubeletOverlay generates the build overlay that links kubevol's volume manager into the
// kubelet (internal/cluster/kubeletoverlay), for the control plane's module, and returns the build
// flags that use it.
func KubeletOverlay(root string) (kubeletoverlay.Build, error) {
	cache, err := cacheDir()
	if err != nil {
		return kubeletoverlay.Build{}, err
	}
	return kubeletoverlay.Generate(filepath.Join(root, clusterModule), filepath.Join(cache, "kubelet-overlay"))
}

func cacheDir() (string, error) {
	dir := os.Getenv(CacheDirEnv)
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory (set %s): %w", CacheDirEnv, err)
		}
		dir = filepath.Join(base, "kubevol")
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// build runs `go build -v` in the module dir with flags, its environment plus env, and
// turns its package lines into a progress report.
func build(ctx context.Context, dir, out string, env, flags []string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	total := countPackages(ctx, dir, env, flags)
	tmp := out + ".tmp"
	args := append(append([]string{"build", "-v"}, flags...), "-o", tmp, ".")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	var tail []string
	built, last := 0, time.Now()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, ": ") {
			tail = append(tail, line) // compiler diagnostics, kept for the error
			continue
		}
		built++
		if time.Since(last) >= 15*time.Second {
			last = time.Now()
			if total > 0 {
				fmt.Fprintf(progress, "  building: %d/%d packages compiled, %s elapsed\n", built, total, time.Since(start).Round(time.Second))
			} else {
				fmt.Fprintf(progress, "  building: %d packages compiled, %s elapsed\n", built, time.Since(start).Round(time.Second))
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go build %s: %w\n%s", dir, err, strings.Join(tail, "\n"))
	}
	fmt.Fprintf(progress, "built %s in %s\n", filepath.Base(out), time.Since(start).Round(time.Second))
	return os.Rename(tmp, out)
}

func countPackages(ctx context.Context, dir string, env, flags []string) int {
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"list"}, flags...), "-deps", ".")...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}
