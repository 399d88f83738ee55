// Package kubeletoverlay generates the Go build overlay that lets the upstream kubelet run
// kubevol's volume manager, chosen when it starts, without a changed copy of any upstream
// file in the repository.
//
// The kubelet has no plug point for its volume manager: it calls
// volumemanager.NewVolumeManager. The overlay renames that constructor in the module's
// own volume_manager.go (read from the module cache at build time) and adds a file whose
// NewVolumeManager calls a hook, Replacement, before the stock constructor. It also adds a
// lookup of the CSI drivers the kubelet's plugin watcher registered, so that kubevol's CSI
// plugin dials them without registering them a second time, and a file to the
// kubevol-cluster main package that imports the adapter (cmd/kubevol-cluster/kubeletvm),
// which sets the hook.
//
// `go build -overlay` refuses to replace files beneath GOMODCACHE, so the module is
// hard-linked (or copied) into the cache directory once, and a generated go.mod (-modfile)
// replaces k8s.io/kubernetes with that copy. The generator fails with a clear error when
// the upstream files no longer have the shape it expects.
package kubeletoverlay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Module is the upstream module the overlay changes.
const Module = "k8s.io/kubernetes"

// Build is what `go build` (or vet) needs, run in the kubevol-cluster module: the flags
// -modfile=ModFile -overlay=Overlay.
type Build struct {
	ModFile string
	Overlay string
}

// Flags are the build flags.
func (b Build) Flags() []string { return []string{"-modfile=" + b.ModFile, "-overlay=" + b.Overlay} }

const (
	volumeManagerFile = "pkg/kubelet/volumemanager/volume_manager.go"
	hookFile          = "pkg/kubelet/volumemanager/zz_kubevol_hook.go"
	csiStoreFile      = "pkg/volume/csi/csi_drivers_store.go"
	csiLookupFile     = "pkg/volume/csi/zz_kubevol_drivers.go"
	mainFile          = "zz_kubevol_volumemanager.go"
	stockConstructor  = "newStockVolumeManager"
)

// wantParams is NewVolumeManager's signature the hook file is written for; any other
// signature stops the build instead of producing a kubelet that does not compile or, worse,
// passes arguments in the wrong order.
var wantParams = []string{
	"controllerAttachDetachEnabled bool",
	"nodeName k8stypes.NodeName",
	"podManager PodManager",
	"podStateProvider PodStateProvider",
	"kubeClient clientset.Interface",
	"volumePluginMgr *volume.VolumePluginMgr",
	"mounter mount.Interface",
	"hostutil hostutil.HostUtils",
	"kubeletPodsDir string",
	"recorder record.EventRecorder",
	"blockVolumePathHandler volumepathhandler.BlockVolumePathHandler",
	"volumeHealthStatusUpdater volumehealth.StatusUpdater",
	"volumeHealthProbeInterval time.Duration",
}

// Generate writes the overlay for the kubevol-cluster module at clusterDir (whose go.mod
// requires k8s.io/kubernetes) into workDir, which it owns.
func Generate(clusterDir, workDir string) (Build, error) {
	modDir, version, err := moduleDir(clusterDir)
	if err != nil {
		return Build{}, err
	}
	copyDir := filepath.Join(workDir, "k8s.io", "kubernetes@"+version)
	if err := linkModule(modDir, copyDir); err != nil {
		return Build{}, err
	}

	files := map[string][]byte{}
	src, err := os.ReadFile(filepath.Join(copyDir, volumeManagerFile))
	if err != nil {
		return Build{}, err
	}
	renamed, err := renameConstructor(src)
	if err != nil {
		return Build{}, fmt.Errorf("%s@%s %s: %w", Module, version, volumeManagerFile, err)
	}
	files[filepath.Join(copyDir, volumeManagerFile)] = renamed
	files[filepath.Join(copyDir, hookFile)] = []byte(hookSource)
	store, err := os.ReadFile(filepath.Join(copyDir, csiStoreFile))
	if err != nil {
		return Build{}, err
	}
	if err := checkDriversStore(store); err != nil {
		return Build{}, fmt.Errorf("%s@%s %s: %w", Module, version, csiStoreFile, err)
	}
	files[filepath.Join(copyDir, csiLookupFile)] = []byte(csiLookupSource)
	files[filepath.Join(clusterDir, mainFile)] = []byte(mainSource)

	// The generated files are named by their content, so that concurrent builds never
	// see a half-written one and the build cache sees the same paths every time.
	h := sha256.New()
	for _, name := range sortedKeys(files) {
		fmt.Fprintf(h, "%s %d\n", name, len(files[name]))
		h.Write(files[name])
	}
	genDir := filepath.Join(workDir, "gen-"+hex.EncodeToString(h.Sum(nil))[:12])
	overlay := struct{ Replace map[string]string }{Replace: map[string]string{}}
	for _, name := range sortedKeys(files) {
		dst := filepath.Join(genDir, strings.ReplaceAll(strings.TrimPrefix(name, "/"), "/", "_"))
		if err := writeFile(dst, files[name]); err != nil {
			return Build{}, err
		}
		overlay.Replace[name] = dst
	}
	b := Build{Overlay: filepath.Join(genDir, "overlay.json"), ModFile: filepath.Join(genDir, "go.mod")}
	data, _ := json.MarshalIndent(overlay, "", "  ")
	if err := writeFile(b.Overlay, data); err != nil {
		return Build{}, err
	}
	mod, err := modFile(clusterDir, copyDir)
	if err != nil {
		return Build{}, err
	}
	if err := writeFile(b.ModFile, mod); err != nil {
		return Build{}, err
	}
	sum, err := os.ReadFile(filepath.Join(clusterDir, "go.sum"))
	if err != nil {
		return Build{}, err
	}
	return b, writeFile(strings.TrimSuffix(b.ModFile, ".mod")+".sum", sum)
}

// moduleDir is where the module cache holds the k8s.io/kubernetes that clusterDir's
// module requires, downloaded if need be.
func moduleDir(clusterDir string) (dir, version string, err error) {
	cmd := exec.Command("go", "mod", "download", "-json", Module)
	cmd.Dir = clusterDir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", "", fmt.Errorf("go mod download %s: %w", Module, err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", "", err
	}
	if m.Error != "" || m.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s: %s", Module, m.Error)
	}
	return m.Dir, m.Version, nil
}

// linkModule makes dst a copy of the module at src: hard links where src and dst share a
// file system (under a second), a copy otherwise. A complete copy is kept and reused.
func linkModule(src, dst string) error {
	done := filepath.Join(dst, ".kubevol-complete")
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-al", src, tmp).CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		if out2, err := exec.Command("cp", "-a", src, tmp).CombinedOutput(); err != nil {
			return fmt.Errorf("copy %s: %v: %s%s", src, err, out, out2)
		}
	}
	// The module cache's directories are read-only; the copy's must take the marker and,
	// later, be removable. Files keep their mode: hard links share it with the cache.
	err := filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return os.Chmod(path, 0o755)
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".kubevol-complete"), nil, 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(dst)
	return os.Rename(tmp, dst)
}

// renameConstructor renames NewVolumeManager to newStockVolumeManager after checking its
// signature, and changes nothing else.
func renameConstructor(src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "volume_manager.go", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if f.Name.Name != "volumemanager" {
		return nil, fmt.Errorf("package %s, want volumemanager", f.Name.Name)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Recv == nil && d.Name.Name == "NewVolumeManager" {
			fn = d
		}
		if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == stockConstructor {
			return nil, fmt.Errorf("already declares %s", stockConstructor)
		}
	}
	if fn == nil {
		return nil, errors.New("no func NewVolumeManager: the kubelet's volume manager changed; update internal/cluster/kubeletoverlay")
	}
	var got []string
	for _, field := range fn.Type.Params.List {
		var typ bytes.Buffer
		_ = printer.Fprint(&typ, fset, field.Type)
		for _, n := range field.Names {
			got = append(got, n.Name+" "+typ.String())
		}
	}
	var results []string
	if fn.Type.Results != nil {
		for _, field := range fn.Type.Results.List {
			var typ bytes.Buffer
			_ = printer.Fprint(&typ, fset, field.Type)
			results = append(results, typ.String())
		}
	}
	if strings.Join(got, ", ") != strings.Join(wantParams, ", ") || strings.Join(results, ",") != "VolumeManager" {
		return nil, fmt.Errorf("NewVolumeManager(%s) %s, want NewVolumeManager(%s) VolumeManager: update internal/cluster/kubeletoverlay",
			strings.Join(got, ", "), strings.Join(results, ","), strings.Join(wantParams, ", "))
	}
	off := fset.Position(fn.Name.Pos()).Offset
	if string(src[off:off+len("NewVolumeManager")]) != "NewVolumeManager" {
		return nil, errors.New("cannot locate the name NewVolumeManager")
	}
	out := append([]byte{}, src[:off]...)
	out = append(out, stockConstructor...)
	return append(out, src[off+len("NewVolumeManager"):]...), nil
}

// checkDriversStore checks what the CSI lookup file uses: the package-level csiDrivers
// store, its Get, and the unexported endpoint of a Driver.
func checkDriversStore(src []byte) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "csi_drivers_store.go", src, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	var endpoint, get bool
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeSpec:
			if st, ok := n.Type.(*ast.StructType); ok && n.Name.Name == "Driver" {
				for _, fl := range st.Fields.List {
					for _, name := range fl.Names {
						if name.Name == "endpoint" {
							if id, ok := fl.Type.(*ast.Ident); ok && id.Name == "string" {
								endpoint = true
							}
						}
					}
				}
			}
		case *ast.FuncDecl:
			if n.Name.Name == "Get" && n.Recv != nil {
				get = true
			}
		}
		return true
	})
	if !endpoint || !get {
		return errors.New("no Driver.endpoint string or DriversStore.Get: the kubelet's CSI driver store changed; update internal/cluster/kubeletoverlay")
	}
	return nil
}

// modFile is clusterDir's go.mod with k8s.io/kubernetes replaced by its copy, and relative
// replacements made absolute (they would be read relative to the generated file).
func modFile(clusterDir, copyDir string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(clusterDir, "go.mod"))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.Index(line, "=> ../"); i >= 0 {
			rel := strings.TrimSpace(line[i+3:])
			line = line[:i+3] + filepath.Join(clusterDir, rel)
		}
		out.WriteString(line + "\n")
	}
	fmt.Fprintf(&out, "\n// Generated: the kubelet's volume manager hook (internal/cluster/kubeletoverlay).\nreplace %s => %s\n", Module, copyDir)
	return out.Bytes(), nil
}

func writeFile(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
