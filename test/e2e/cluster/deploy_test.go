package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// Every manifest under deploy/ (and examples/block) must be accepted by a real apiserver: a server-side apply dry
// run runs validation, defaulting and admission without persisting anything. Namespaces are
// created for real first, since a dry run into a missing namespace is rejected.
func TestDeployManifestsDryRun(t *testing.T) {
	ctx := framework.Context(t, 2*time.Minute)
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs := loadManifests(t, filepath.Join(root, "deploy"))
	if len(objs) == 0 {
		t.Fatal("no manifests found under deploy/")
	}
	// The block and expansion examples go into the demo's namespace.
	examples := loadManifests(t, filepath.Join(root, "examples", "block"))
	if len(examples) != 6 {
		t.Fatalf("examples/block has %d objects, want 6", len(examples))
	}
	objs = append(append(objs, loadManifests(t, filepath.Join(root, "examples", "namespace.yaml"))...), examples...)

	cfg := framework.RESTConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	apply := func(m manifest, dryRun bool) error {
		gvk := m.obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		ri := dyn.Resource(mapping.Resource)
		var target dynamic.ResourceInterface = ri
		if mapping.Scope.Name() == "namespace" {
			if m.obj.GetNamespace() == "" {
				return errors.New("namespaced object without metadata.namespace")
			}
			target = ri.Namespace(m.obj.GetNamespace())
		}
		data, err := m.obj.MarshalJSON()
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: "kubevol-e2e", Force: ptr.To(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = target.Patch(ctx, m.obj.GetName(), types.ApplyPatchType, data, opts)
		return err
	}

	for _, m := range objs {
		if m.obj.GetKind() == "Namespace" {
			if err := apply(m, false); err != nil {
				t.Fatalf("%s: create namespace %s: %v", m.source, m.obj.GetName(), err)
			}
			name := m.obj.GetName()
			t.Cleanup(func() {
				err := framework.Client(t).CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete namespace %s: %v", name, err)
				}
			})
		}
	}
	for _, m := range objs {
		if err := apply(m, true); err != nil {
			t.Errorf("%s: %s %q rejected by the apiserver: %v", m.source, m.obj.GetKind(), m.obj.GetName(), err)
		}
	}
	t.Logf("%d objects from deploy/ accepted by a server-side dry run", len(objs))
}

type manifest struct {
	source string
	obj    *unstructured.Unstructured
}

func loadManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		if d.Name() == "kustomization.yaml" || strings.Contains(filepath.ToSlash(path), "/deploy/swap/") {
			return nil // kustomize's own configuration, not an API object
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		rel, _ := filepath.Rel(dir, path)
		for i := 0; ; i++ {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			if len(obj.Object) == 0 {
				continue // an empty document between separators
			}
			if obj.GetAnnotations()["config.kubernetes.io/local-config"] == "true" {
				continue // read by kustomize only (deploy/driver-name)
			}
			out = append(out, manifest{source: fmt.Sprintf("%s#%d", rel, i), obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The node agent gets no RBAC of ours: its rights come from the Node authorizer, and its
// service account is bound only to upstream's roles (file CSRs; a node renews its own
// certificate). No Secrets, no tokens, no ClusterRole.
func TestDeployNodeAgentHasOnlyUpstreamRoles(t *testing.T) {
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bindings := 0
	for _, m := range loadManifests(t, filepath.Join(root, "deploy", "node")) {
		switch m.obj.GetKind() {
		case "ClusterRole", "Role":
			t.Errorf("%s: %s %s: the node agent needs no role of its own", m.source, m.obj.GetKind(), m.obj.GetName())
		case "ClusterRoleBinding", "RoleBinding":
			bindings++
			role, _, _ := unstructured.NestedString(m.obj.Object, "roleRef", "name")
			if role != "system:node-bootstrapper" && role != "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient" {
				t.Errorf("%s: %s binds %s, not one of upstream's TLS bootstrap roles", m.source, m.obj.GetName(), role)
			}
		}
	}
	if bindings != 2 {
		t.Errorf("%d bindings in deploy/node, want 2", bindings)
	}
}
