package localcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cniModule holds the CNI plugins of the container-running mode in a module of their own:
// their dependencies are newer than the control plane's.
const cniModule = "hack/cni"

// CNIPlugins are the plugins the container-running mode's network uses, as their binary names.
var CNIPlugins = []string{"bridge", "host-local", "loopback"}

var cniPackages = map[string]string{
	"bridge":     "github.com/containernetworking/plugins/plugins/main/bridge",
	"host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
	"loopback":   "github.com/containernetworking/plugins/plugins/main/loopback",
}

// agnhostPackage is the e2e suite's test image program, built from the control plane's module
// (the same Kubernetes release).
const agnhostPackage = "k8s.io/kubernetes/test/images/agnhost"

// EnsureCNIPlugins returns a directory holding the CNI plugins bridge, host-local and
// loopback, built from hack/cni when the cache has none for its go.mod and go.sum.
func EnsureCNIPlugins(ctx context.Context, progress io.Writer) (string, error) {
	return ensureBuilt(ctx, progress, artifact{prefix: "cni-", module: cniModule, what: "the CNI plugins " + strings.Join(CNIPlugins, ", "),
		build: func(ctx context.Context, dir, out string) error {
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			args := []string{"build", "-o", out + "/"}
			for _, p := range CNIPlugins {
				args = append(args, cniPackages[p])
			}
			return goCommand(ctx, dir, nil, args...)
		}})
}

// EnsureAgnhost returns a static agnhost binary, for the e2e suite's agnhost image.
func EnsureAgnhost(ctx context.Context, progress io.Writer) (string, error) {
	return ensureBuilt(ctx, progress, artifact{prefix: "agnhost-", module: clusterModule, salt: "CGO_ENABLED=0", what: "agnhost " + UpstreamVersion + " (static)",
		build: func(ctx context.Context, dir, out string) error {
			return goCommand(ctx, dir, []string{"CGO_ENABLED=0"}, "build", "-ldflags", "-s -w", "-o", out, agnhostPackage)
		}})
}

// artifact is something built from a module of the source tree and cached by its sources.
type artifact struct {
	prefix, module, salt, what string
	// build writes the artifact (a file or a directory) to out.
	build func(ctx context.Context, moduleDir, out string) error
}

// ensureBuilt returns the cached artifact for the module's current sources, building it
// once under a lock, as EnsureBinary does for the control plane, and holds it for as long
// as this process runs.
func ensureBuilt(ctx context.Context, progress io.Writer, a artifact) (string, error) {
	out, err := findOrBuild(ctx, progress, a)
	if err == nil {
		hold(out)
	}
	return out, err
}

func findOrBuild(ctx context.Context, progress io.Writer, a artifact) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	root, err := FindModuleRoot()
	if err != nil {
		if newest := newestEntry(cache, a.prefix); newest != "" {
			return newest, nil
		}
		return "", err
	}
	key, err := sourceKey(root, a.module, a.salt)
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, a.prefix+key)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	err = buildLocked(filepath.Join(cache, "build-"+strings.TrimSuffix(a.prefix, "-")+".lock"), out, func() error {
		fmt.Fprintf(progress, "building %s into %s (first run only)\n", a.what, out)
		start := time.Now()
		tmp := out + ".tmp"
		_ = os.RemoveAll(tmp)
		if err := a.build(ctx, filepath.Join(root, a.module), tmp); err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("build %s: %w", a.what, err)
		}
		if err := os.Rename(tmp, out); err != nil {
			return err
		}
		fmt.Fprintf(progress, "built %s in %s\n", a.what, time.Since(start).Round(time.Second))
		removeStale(cache, a.prefix, out)
		return nil
	})
	if err != nil {
		return "", err
	}
	return out, nil
}

func goCommand(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func newestEntry(cache, prefix string) string {
	entries, _ := filepath.Glob(filepath.Join(cache, prefix+"*"))
	var newest string
	var newestTime time.Time
	for _, e := range entries {
		st, err := os.Stat(e)
		if err != nil || strings.HasSuffix(e, ".tmp") || strings.HasSuffix(e, inUseSuffix) {
			continue
		}
		if st.ModTime().After(newestTime) {
			newest, newestTime = e, st.ModTime()
		}
	}
	return newest
}
