package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kubevol/kubevol/internal/runtime/filelock"
)

// VersionEnv picks another Kubernetes release for the control plane, for the compatibility
// matrix (`make matrix`): v1.<minor>.<patch> of any k8s.io/kubernetes the Go module proxy
// serves. Unset, or UpstreamVersion, means the control plane of cmd/kubevol-cluster.
const VersionEnv = "KUBEVOL_KUBERNETES_VERSION"

var releasePattern = regexp.MustCompile(`^v1\.([0-9]+)\.([0-9]+)$`)

// Version is the Kubernetes release the control plane of this process is built from.
func Version() string {
	if v := os.Getenv(VersionEnv); v != "" {
		return v
	}
	return UpstreamVersion
}

// ldFlags stamps the release into the control plane, as upstream's build does, so /version
// and clients that check the server version see it instead of v0.0.0-master.
func ldFlags(version string) string {
	m := releasePattern.FindStringSubmatch(version)
	minor := ""
	if m != nil {
		minor = m[1]
	}
	return "-X k8s.io/component-base/version.gitVersion=" + version +
		" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=" + minor +
		" -X k8s.io/component-base/version.gitTreeState=clean"
}

// release is what the module of one release is generated from.
type release struct {
	Version string
	// Staging are the staging modules k8s.io/kubernetes replaces with its own directories
	// (k8s.io/api, k8s.io/client-go, ...), published at v0.<minor>.<patch>.
	Staging []string
	// Etcd is the etcd server of the release's build/dependencies.yaml: the one it ships.
	Etcd string
}

// ensureReleaseBinary builds the control plane of another release than the pinned one.
// cmd/kubevol-cluster's main.go is the same for every release, but its go.mod pins one:
// the module is generated in the cache, its replace lines derived from that release's
// own go.mod (in the module cache), and built there. The kubelet of such a binary is the
// stock one: the build overlay that links kubevol's volume manager into it fits only the
// pinned release (volumemanager.NewVolumeManager changed its signature in 1.37, and kubevol
// builds against the pinned release's libraries).
func ensureReleaseBinary(ctx context.Context, root, cache, version string, progress io.Writer, building func(bool)) (string, error) {
	if !releasePattern.MatchString(version) {
		return "", fmt.Errorf("%s=%q: want a release like v1.35.4", VersionEnv, version)
	}
	prefix := "control-plane-" + version + "-"
	var bin string
	err := filelock.With(filepath.Join(cache, "build-control-plane-"+version+".lock"), 0o644, func() error {
		dir := filepath.Join(cache, "module-control-plane-"+version)
		key, err := generateReleaseModule(ctx, root, dir, version)
		if err != nil {
			return err
		}
		bin = filepath.Join(cache, prefix+key)
		if _, err := os.Stat(bin); err == nil {
			return nil
		}
		if building != nil {
			building(true)
			defer building(false)
		}
		fmt.Fprintf(progress, "building kube-apiserver %s, etcd, kube-controller-manager, kube-scheduler and kubelet into %s (first run only; about 12 minutes cold on two cores)\n", version, bin)
		if err := build(ctx, dir, bin, nil, []string{"-ldflags", ldFlags(version)}, progress); err != nil {
			return err
		}
		removeStale(cache, prefix, bin)
		return nil
	})
	if err != nil {
		return "", err
	}
	return bin, nil
}

// generateReleaseModule writes the control plane's module for version into dir, tidied,
// and returns the key of what it builds (Go version, flags, go.mod, go.sum, main.go and
// the version package).
func generateReleaseModule(ctx context.Context, root, dir, version string) (string, error) {
	rel, err := loadRelease(ctx, dir, version)
	if err != nil {
		return "", err
	}
	mainSrc, err := os.ReadFile(filepath.Join(root, clusterModule, "main.go"))
	if err != nil {
		return "", err
	}
	stub, err := versionStub(root)
	if err != nil {
		return "", err
	}
	want := releaseGoMod(rel)
	// go.mod.in is the untidied go.mod: while it, main.go and the stub are unchanged, the
	// tidied go.mod and go.sum stand.
	in := filepath.Join(dir, "go.mod.in")
	fresh := map[string][]byte{"main.go": mainSrc}
	for name, data := range stub {
		fresh[filepath.Join(versionStubDir, name)] = data
	}
	stale := false
	if old, _ := os.ReadFile(in); !bytes.Equal(old, want) {
		stale = true
	}
	if _, err := os.Stat(filepath.Join(dir, "go.sum")); err != nil {
		stale = true
	}
	for name, data := range fresh {
		if old, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(old, data) {
			stale = true
		}
	}
	if stale {
		_ = os.Remove(in)
		_ = os.RemoveAll(filepath.Join(dir, versionStubDir))
		fresh["go.mod"] = want
		for name, data := range fresh {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return "", err
			}
		}
		if err := goCommand(ctx, dir, []string{"GOFLAGS=-mod=mod"}, "mod", "tidy"); err != nil {
			return "", fmt.Errorf("the control plane's module for %s: %w", version, err)
		}
		if err := os.WriteFile(in, want, 0o644); err != nil {
			return "", err
		}
	}
	return sourceKey(dir, ".", ldFlags(version), versionStubDir)
}

// versionStubDir holds, in a release's module, a module of kubevol's path with only
// kubevol's version package, which main.go reports: the whole kubevol module there would
// raise the release's dependencies to kubevol's (a CSI spec the release's kubelet does not
// build with, for one), and the version package needs nothing but the standard library.
const versionStubDir = "kubevol-version"

// versionStub returns the stub module's files: its go.mod and the version package's sources.
func versionStub(root string) (map[string][]byte, error) {
	files := map[string][]byte{"go.mod": fmt.Appendf(nil, "module %s\n\ngo 1.26.0\n", modulePath)}
	srcs, err := filepath.Glob(filepath.Join(root, "internal", "version", "*.go"))
	if err != nil {
		return nil, err
	}
	for _, src := range srcs {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		files[filepath.Join("internal", "version", filepath.Base(src))] = data
	}
	if len(files) == 1 {
		return nil, fmt.Errorf("no version package in %s", root)
	}
	return files, nil
}

// releaseGoMod is the untidied go.mod of the control plane of rel: the main package's
// requirements, the staging modules at the release's v0 version, and kubevol's version
// package from the stub module beside it.
func releaseGoMod(rel release) []byte {
	staging := "v0" + strings.TrimPrefix(rel.Version, "v1")
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Generated by kubevol's internal/cluster/localcluster for Kubernetes %s. DO NOT EDIT.\n", rel.Version)
	fmt.Fprintf(&b, "module %s/%s\n\ngo 1.26.0\n\nreplace (\n\t%s => ./%s\n", modulePath, clusterModule, modulePath, versionStubDir)
	for _, m := range rel.Staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, staging)
	}
	fmt.Fprintf(&b, ")\n\nrequire (\n\t%s v0.0.0-00010101000000-000000000000\n\tgo.etcd.io/etcd/server/v3 v%s\n\tk8s.io/kubernetes %s\n)\n", modulePath, rel.Etcd, rel.Version)
	return b.Bytes()
}

// loadRelease reads the staging modules and etcd version of k8s.io/kubernetes at version
// from the module cache, downloading it first if needed.
func loadRelease(ctx context.Context, dir, version string) (release, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	cmd.Dir = filepath.Dir(dir) // outside any module
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	cmd.Stdout = &out
	runErr := cmd.Run()
	var mod struct{ Dir, GoMod, Error string }
	if err := json.Unmarshal(out.Bytes(), &mod); err != nil || mod.Error != "" || runErr != nil {
		return release{}, fmt.Errorf("k8s.io/kubernetes@%s from the Go module proxy: %v %s", version, runErr, mod.Error)
	}
	goMod, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return release{}, err
	}
	deps, err := os.ReadFile(filepath.Join(mod.Dir, "build", "dependencies.yaml"))
	if err != nil {
		return release{}, err
	}
	return parseRelease(version, goMod, deps)
}

func parseRelease(version string, goMod, dependencies []byte) (release, error) {
	rel := release{Version: version}
	for _, line := range strings.Split(string(goMod), "\n") {
		// k8s.io/api => ./staging/src/k8s.io/api
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "=>" && f[2] == "./staging/src/"+f[0] {
			rel.Staging = append(rel.Staging, f[0])
		}
	}
	if len(rel.Staging) == 0 {
		return release{}, fmt.Errorf("k8s.io/kubernetes %s: no staging replace lines in its go.mod", version)
	}
	// - name: "etcd"
	//   version: 3.6.5
	sc := bufio.NewScanner(bytes.NewReader(dependencies))
	inEtcd := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "- name:") {
			inEtcd = strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "- name:")), `"`) == "etcd"
			continue
		}
		if inEtcd && strings.HasPrefix(line, "version:") {
			rel.Etcd = strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "version:")), `"`)
			break
		}
	}
	if rel.Etcd == "" {
		return release{}, fmt.Errorf("k8s.io/kubernetes %s: no etcd in build/dependencies.yaml", version)
	}
	return rel, nil
}
