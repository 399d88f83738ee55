package crds

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestGeneratedCRDsAreCurrent runs the generator (hack/crdgen, a module of its own) against
// this module's go.mod and compares its output with the embedded files, so that a new
// client module version, or a hand edit, cannot go unnoticed. Run `go generate
// ./internal/component/snapshotter/crds` to update them.
func TestGeneratedCRDsAreCurrent(t *testing.T) {
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("go", "-C", filepath.Join(root, "hack", "crdgen"), "run", ".", "-root", root, "-out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crdgen: %v\n%s", err, b)
	}
	embedded, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	generated, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(generated) != len(embedded) {
		t.Errorf("generated %d files, embedded %d", len(generated), len(embedded))
	}
	for _, f := range generated {
		want, err := os.ReadFile(filepath.Join(out, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := embedded[f.Name()]; !ok || !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output: run go generate ./internal/component/snapshotter/crds", f.Name())
		}
	}
}

// The edits upstream makes after controller-gen are in the embedded CRDs.
func TestUpstreamEdits(t *testing.T) {
	all, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("%d CRDs, want 6", len(all))
	}
	for _, crd := range all {
		if crd.Spec.Group == "groupsnapshot.storage.k8s.io" {
			checkGroupVersions(t, crd.Name, crd.Spec.Versions)
			continue
		}
		if !strings.HasPrefix(crd.Annotations["api-approved.kubernetes.io"], "https://github.com/kubernetes-csi/external-snapshotter/pull/") {
			t.Errorf("%s: api-approved.kubernetes.io is %q", crd.Name, crd.Annotations["api-approved.kubernetes.io"])
		}
		var names []string
		for _, v := range crd.Spec.Versions {
			names = append(names, v.Name)
			switch v.Name {
			case "v1":
				if !v.Served || !v.Storage {
					t.Errorf("%s: v1 not served and stored", crd.Name)
				}
			case "v1beta1":
				if v.Served || v.Storage || !v.Deprecated {
					t.Errorf("%s: v1beta1 must be deprecated, neither served nor stored", crd.Name)
				}
			}
		}
		if strings.Join(names, ",") != "v1,v1beta1" {
			t.Errorf("%s: versions %v", crd.Name, names)
		}
		if crd.Spec.Names.Kind == "VolumeSnapshot" {
			for _, v := range crd.Spec.Versions {
				rs := v.Schema.OpenAPIV3Schema.Properties["status"].Properties["restoreSize"]
				if rs.Type != "string" || len(rs.AnyOf) != 0 {
					t.Errorf("%s %s: status.restoreSize is %q anyOf %v, want type string", crd.Name, v.Name, rs.Type, rs.AnyOf)
				}
			}
		}
	}
}

// The group snapshot CRDs serve v1, v1beta1 and v1beta2 and store v1beta2, as upstream's
// shipped CRDs of the same client version.
func checkGroupVersions(t *testing.T, name string, versions []apiextensionsv1.CustomResourceDefinitionVersion) {
	t.Helper()
	var names []string
	for _, v := range versions {
		names = append(names, v.Name)
		if !v.Served || v.Storage != (v.Name == "v1beta2") {
			t.Errorf("%s %s: served %v storage %v", name, v.Name, v.Served, v.Storage)
		}
	}
	if strings.Join(names, ",") != "v1,v1beta1,v1beta2" {
		t.Errorf("%s: versions %v", name, names)
	}
}
