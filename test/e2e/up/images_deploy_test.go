package up

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kubevol/kubevol/internal/build/kubevolimages"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/kubecheck"
)

// The overlay's namespace and driver name: neither may be those of the host-process stack
// that `kubevol up` runs beside it (kubevol-system, local.kubevol.io).
const (
	imagesNamespace  = "kubevol-images"
	imagesDriverName = "images.kubevol.io"
)

// renderDeploy renders deploy/ through an overlay as an operator writes one (docs/images.md):
// its namespace, the driver name through the driver-name component, the images by tag.
// kubeletRoot and stateDir are then put where the kubelet's /var/lib/kubelet and the
// driver's /var/lib/kubevol/driver are on the host, as an operator of a distribution with
// another kubelet root (k0s, microk8s) rewrites them: the kubelet announces and calls paths
// of its own root, so the node plugin must see them at the same paths.
func renderDeploy(t *testing.T, kubeletRoot, stateDir string) []*unstructured.Unstructured {
	t.Helper()
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	deploy, err := filepath.Rel(dir, filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	var k strings.Builder
	fmt.Fprintf(&k, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\n", imagesNamespace)
	fmt.Fprintf(&k, "resources: [%s, name.yaml]\ncomponents: [%s/driver-name]\nimages:\n", deploy, deploy)
	for _, r := range kubevolimages.Roles {
		fmt.Fprintf(&k, "  - {name: %s/%s, newTag: %s}\n", kubevolimages.DefaultPrefix, r.Name, imagesTag)
	}
	name := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kubevol-driver-name\n" +
		"  annotations: {config.kubernetes.io/local-config: \"true\"}\ndata: {name: " + imagesDriverName + "}\n"
	for f, body := range map[string]string{"kustomization.yaml": k.String(), "name.yaml": name} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize the overlay of deploy/: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetKind() == "DaemonSet" || r.GetKind() == "Deployment" {
			s := strings.ReplaceAll(string(y), "/var/lib/kubelet", kubeletRoot)
			y = []byte(strings.ReplaceAll(s, "path: /var/lib/kubevol/driver\n", "path: "+stateDir+"\n"))
		}
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(y, &o.Object); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// applier applies and deletes rendered objects, as `kubectl apply --server-side` and
// `kubectl delete` do.
type applier struct{ *kubecheck.Applier }

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	a, err := kubecheck.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{a}
}

// applyThenRun applies everything but the workloads, waits until the apiserver's RBAC
// authorizer grants each bound ServiceAccount its role's first rule (its cache follows the
// bindings a moment later), then applies the workloads: their first requests are not
// refused for a binding they already have.
func (a *applier) applyThenRun(ctx context.Context, cs kubernetes.Interface, objs []*unstructured.Unstructured) error {
	var rbac, workloads []*unstructured.Unstructured
	for _, o := range objs {
		if k := o.GetKind(); k == "Deployment" || k == "DaemonSet" {
			workloads = append(workloads, o)
		} else {
			rbac = append(rbac, o)
		}
	}
	if err := a.apply(ctx, rbac); err != nil {
		return err
	}
	for _, b := range rbac {
		if k := b.GetKind(); k != "RoleBinding" && k != "ClusterRoleBinding" {
			continue
		}
		if err := waitGranted(ctx, cs, objs, b); err != nil {
			return err
		}
	}
	return a.apply(ctx, workloads)
}

// waitGranted waits until each ServiceAccount subject of binding b may do its role's first
// rule's first verb on its first resource.
func waitGranted(ctx context.Context, cs kubernetes.Interface, objs []*unstructured.Unstructured, b *unstructured.Unstructured) error {
	kind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
	name, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
	var rule map[string]any
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name && (kind == "ClusterRole" || o.GetNamespace() == b.GetNamespace()) {
			if rules, _, _ := unstructured.NestedSlice(o.Object, "rules"); len(rules) > 0 {
				rule, _ = rules[0].(map[string]any)
			}
		}
	}
	if rule == nil {
		return nil // upstream's roles (system:...) are the apiserver's own
	}
	first := func(k string) string {
		l, _, _ := unstructured.NestedStringSlice(rule, k)
		if len(l) == 0 {
			return ""
		}
		return l[0]
	}
	attrs := &authorizationv1.ResourceAttributes{Namespace: b.GetNamespace(), Group: first("apiGroups"), Resource: first("resources"), Verb: first("verbs")}
	subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
	for _, s := range subjects {
		m, _ := s.(map[string]any)
		if m["kind"] != "ServiceAccount" {
			continue
		}
		user := fmt.Sprintf("system:serviceaccount:%v:%v", m["namespace"], m["name"])
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}, metav1.CreateOptions{})
			return err == nil && r.Status.Allowed, nil
		})
		if err != nil {
			return fmt.Errorf("%s %s: %s never granted %+v: %w", b.GetKind(), b.GetName(), user, *attrs, err)
		}
	}
	return nil
}

func (a *applier) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	force := true
	for _, o := range objs {
		r, err := a.Resource(o)
		if err != nil {
			return err
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := r.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "kubevol-e2e", Force: &force}); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// deleteAll deletes the objects in reverse order (workloads before their RBAC, the
// namespace last) and waits until every one is gone, its pods' containers included.
func (a *applier) deleteAll(ctx context.Context, objs []*unstructured.Unstructured) error {
	bg := metav1.DeletePropagationForeground
	for i := len(objs) - 1; i >= 0; i-- {
		r, err := a.Resource(objs[i])
		if err != nil {
			return err
		}
		if err := r.Delete(ctx, objs[i].GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", objs[i].GetKind(), objs[i].GetName(), err)
		}
	}
	for _, o := range objs {
		r, err := a.Resource(o)
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := r.Get(ctx, o.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			return fmt.Errorf("%s %s still there: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}
