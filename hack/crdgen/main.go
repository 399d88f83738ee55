// Command crdgen generates the snapshot.storage.k8s.io and groupsnapshot.storage.k8s.io CRDs
// that `kubevol up` installs (internal/component/snapshotter/crds) from the upstream API types of
// github.com/kubernetes-csi/external-snapshotter/client/v8, at the version the main module
// requires, with controller-tools' CRD generator, then applies the edits external-snapshotter
// makes by hand after running controller-gen:
//
//   - the api-approved.kubernetes.io annotation, which the API server requires for a
//     *.k8s.io group (the approving pull requests upstream names);
//   - the frozen v1beta1 version blocks (served: false, storage: false, deprecated), copied
//     from the CRDs shipped in the same client module, so that a cluster whose objects were
//     once stored as v1beta1 accepts these CRDs;
//   - VolumeSnapshot status.restoreSize declared as a string instead of anyOf integer/string;
//   - for the group snapshot CRDs, generated from the v1, v1beta1 and v1beta2 packages
//     together (all served), the storage version of the CRDs the same client module ships:
//     the types mark both v1 and v1beta2 as storage versions, and upstream keeps v1beta2
//     during the migration.
//
// It is its own Go module, so that controller-tools and its dependencies stay out of the
// main module. Run it through `go generate ./internal/component/snapshotter/crds`.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
	"sigs.k8s.io/controller-tools/pkg/crd"
	"sigs.k8s.io/controller-tools/pkg/genall"
	"sigs.k8s.io/controller-tools/pkg/loader"
	"sigs.k8s.io/yaml"
)

// apiPackage holds the VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass types.
const apiPackage = "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

// groupPackages hold the VolumeGroupSnapshot, VolumeGroupSnapshotContent and
// VolumeGroupSnapshotClass types, one package per served version.
var groupPackages = []string{
	"github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1",
	"github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta1",
	"github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2",
}

// approvals are the api-approved.kubernetes.io values external-snapshotter's CRDs carry.
var approvals = map[string]string{
	"volumesnapshots":             "https://github.com/kubernetes-csi/external-snapshotter/pull/814",
	"volumesnapshotclasses":       "https://github.com/kubernetes-csi/external-snapshotter/pull/814",
	"volumesnapshotcontents":      "https://github.com/kubernetes-csi/external-snapshotter/pull/955",
	"volumegroupsnapshots":        "https://github.com/kubernetes-csi/external-snapshotter/pull/1337",
	"volumegroupsnapshotclasses":  "https://github.com/kubernetes-csi/external-snapshotter/pull/1337",
	"volumegroupsnapshotcontents": "https://github.com/kubernetes-csi/external-snapshotter/pull/1337",
}

func main() {
	root := flag.String("root", ".", "directory of the main module, whose go.mod selects the client module version")
	out := flag.String("out", "", "directory to write the CRD files to")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "crdgen: -out is required")
		os.Exit(2)
	}
	if err := run(*root, *out); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(root, out string) error {
	files, err := Generate(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// memOutput collects the generator's files in memory.
type memOutput map[string]*bytes.Buffer

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

func (m memOutput) Open(_ *loader.Package, path string) (io.WriteCloser, error) {
	b := &bytes.Buffer{}
	m[path] = b
	return nopCloser{b}, nil
}

// Generate returns the edited CRD files by name: three snapshot CRDs, then three group
// snapshot CRDs, each group generated on its own.
func Generate(root string) (map[string][]byte, error) {
	files, err := generate(root, apiPackage)
	if err != nil {
		return nil, err
	}
	group, err := generate(root, groupPackages...)
	if err != nil {
		return nil, err
	}
	for name, data := range group {
		files[name] = data
	}
	if len(files) != 6 {
		return nil, fmt.Errorf("expected 6 CRDs, generated %d", len(files))
	}
	return files, nil
}

func generate(root string, pkgs ...string) (map[string][]byte, error) {
	var gen genall.Generator = crd.Generator{}
	rt, err := genall.Generators{&gen}.ForRootsWithConfig(&packages.Config{Dir: root}, pkgs...)
	if err != nil {
		return nil, fmt.Errorf("load %v: %w", pkgs, err)
	}
	if len(rt.Roots) != len(pkgs) || len(rt.Roots[0].GoFiles) == 0 {
		return nil, fmt.Errorf("packages %v not found from %s", pkgs, root)
	}
	mem := memOutput{}
	rt.OutputRules = genall.OutputRules{Default: mem}
	var errs bytes.Buffer
	rt.ErrorWriter = &errs
	if failed := rt.Run(); failed {
		return nil, fmt.Errorf("controller-gen failed: %s", errs.String())
	}
	// The CRDs upstream ships, for the v1beta1 blocks: <module>/config/crd.
	shipped := filepath.Join(filepath.Dir(rt.Roots[0].GoFiles[0]), "..", "..", "..", "config", "crd")
	files := map[string][]byte{}
	names := make([]string, 0, len(mem))
	for name := range mem {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		edited, err := edit(mem[name].Bytes(), filepath.Join(shipped, name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name] = edited
	}
	if len(files) != 3 {
		return nil, fmt.Errorf("expected 3 CRDs, generated %v", names)
	}
	return files, nil
}

// edit applies upstream's post-generation edits to one generated CRD.
func edit(generated []byte, shippedPath string) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(generated, &obj); err != nil {
		return nil, err
	}
	meta := obj["metadata"].(map[string]any)
	spec := obj["spec"].(map[string]any)
	plural := spec["names"].(map[string]any)["plural"].(string)
	approval, ok := approvals[plural]
	if !ok {
		return nil, fmt.Errorf("unexpected CRD %s", plural)
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann["api-approved.kubernetes.io"] = approval
	// controller-tools names itself "(devel)" when it is not the main module.
	ann["controller-gen.kubebuilder.io/version"] = toolVersion()

	versions := spec["versions"].([]any)
	if plural == "volumesnapshots" {
		for _, v := range versions {
			restoreSize, err := lookup(v, "schema", "openAPIV3Schema", "properties", "status", "properties", "restoreSize")
			if err != nil {
				return nil, err
			}
			delete(restoreSize, "anyOf")
			restoreSize["type"] = "string"
		}
	}

	if spec["group"] == "groupsnapshot.storage.k8s.io" {
		if err := shippedStorage(versions, shippedPath); err != nil {
			return nil, err
		}
	} else {
		old, err := v1beta1Block(shippedPath)
		if err != nil {
			return nil, err
		}
		spec["versions"] = append(versions, old)
	}

	body, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return append([]byte("---\n"), body...), nil
}

// v1beta1Block returns the v1beta1 entry of spec.versions of the CRD upstream ships, checked
// to be neither served nor stored.
func v1beta1Block(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	versions, _ := obj["spec"].(map[string]any)["versions"].([]any)
	for _, v := range versions {
		m := v.(map[string]any)
		if m["name"] != "v1beta1" {
			continue
		}
		if m["served"] != false || m["storage"] != false {
			return nil, errors.New("the shipped v1beta1 version is served or stored")
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s has no v1beta1 version", path)
}

// shippedStorage sets the storage version of generated group CRD versions to the one the
// shipped CRD stores, and checks that the two serve the same versions.
func shippedStorage(versions []any, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return err
	}
	storage := map[string]bool{}
	shipped, _ := obj["spec"].(map[string]any)["versions"].([]any)
	for _, v := range shipped {
		m := v.(map[string]any)
		storage[m["name"].(string)] = m["storage"] == true
	}
	if len(shipped) != len(versions) {
		return fmt.Errorf("generated %d versions, upstream ships %d", len(versions), len(shipped))
	}
	for _, v := range versions {
		m := v.(map[string]any)
		stored, ok := storage[m["name"].(string)]
		if !ok {
			return fmt.Errorf("version %s is not in the shipped CRD", m["name"])
		}
		m["storage"] = stored
	}
	return nil
}

func lookup(v any, path ...string) (map[string]any, error) {
	m, ok := v.(map[string]any)
	for _, p := range path {
		if !ok {
			break
		}
		m, ok = m[p].(map[string]any)
	}
	if !ok {
		return nil, fmt.Errorf("no %s in the generated schema", strings.Join(path, "."))
	}
	return m, nil
}

// toolVersion is the controller-tools version this program was built with.
func toolVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "sigs.k8s.io/controller-tools" {
				return d.Version
			}
		}
	}
	return "(devel)"
}
