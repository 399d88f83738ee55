package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// applier creates rendered objects through the apiserver, as `kubectl apply` would.
type applier struct {
	*kubecheck.Applier
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	a, err := kubecheck.NewApplier(framework.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &applier{Applier: a, t: t, ctx: framework.Context(t, 2*time.Minute), cs: framework.Client(t)}
}

// create creates o, for real or as a server-side dry run (admission and validation, nothing
// stored), and deletes what it stored when the test ends.
func (a *applier) create(o *unstructured.Unstructured, dryRun bool) error {
	a.t.Helper()
	r, err := a.Resource(o)
	if err != nil {
		a.t.Fatalf("%s %s: the apiserver serves no such kind: %v", o.GroupVersionKind(), o.GetName(), err)
	}
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := r.Create(a.ctx, o, opts); err != nil {
		return err
	}
	if !dryRun {
		a.t.Cleanup(func() {
			if err := r.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				a.t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		})
	}
	return nil
}

// Every base, rendered into a namespace of the test's, is accepted by the apiserver field
// by field (strict validation, admission), as `kubectl apply -k` would send it. Stored
// for real, workloads would run on nodes this cluster fakes, so the check is a server-side
// dry run.
func TestBasesAcceptedByAPIServer(t *testing.T) {
	a := newApplier(t)
	ns := framework.Namespace(t)
	for _, base := range []string{".", "sidecars", "node", "approver", "snapshotter", "conversion-webhook"} {
		dir := overlay(t, map[string]string{"kustomization.yaml": "namespace: " + ns + "\nresources: [DEPLOY/" + strings.TrimPrefix(base, ".") + "]\n"})
		for _, o := range render(t, dir) {
			err := a.create(o, true)
			if o.GetKind() == "Namespace" && apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				t.Errorf("%s: %s %s refused: %v", base, o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// deploy/sidecars, applied for real, gives its ServiceAccount upstream's verbs and no
// others where it matters: the attacher's status writes are patches (an update is refused,
// as upstream's role refuses it), the provisioner's claim writes are updates, the resizer's
// claim writes are status patches; nothing may read every secret or start pods.
func TestSidecarsRBACAppliedForReal(t *testing.T) {
	a := newApplier(t)
	ns := framework.Namespace(t)
	prefix := "t" + rand.String(5) + "-"
	dir := overlay(t, map[string]string{"kustomization.yaml": "namespace: " + ns + "\nnamePrefix: " + prefix + "\nresources: [DEPLOY/sidecars]\n"})
	sa := ""
	for _, o := range render(t, dir) {
		if o.GetKind() == "ServiceAccount" {
			sa = o.GetName()
		}
		if err := a.create(o, false); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if sa == "" {
		t.Fatal("deploy/sidecars has no ServiceAccount")
	}
	user := "system:serviceaccount:" + ns + ":" + sa
	for _, c := range []struct {
		verb, group, resource, sub string
		want                       bool
	}{
		{"patch", "storage.k8s.io", "volumeattachments", "status", true},
		{"update", "storage.k8s.io", "volumeattachments", "status", false},
		{"patch", "", "persistentvolumes", "", true},
		{"update", "", "persistentvolumeclaims", "", true},
		{"patch", "", "persistentvolumeclaims", "status", true},
		{"create", "", "persistentvolumes", "", true},
		{"create", "snapshot.storage.k8s.io", "volumesnapshotcontents", "", false},
		{"delete", "", "secrets", "", false},
		{"create", "", "pods", "", false},
		{"update", "", "configmaps", "", false},
	} {
		// The RBAC authorizer sees new bindings through its informers, a moment later.
		var got bool
		err := wait.PollUntilContextTimeout(a.ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = allowed(ctx, a.cs, user, ns, c.verb, c.group, c.resource, c.sub)
			return err == nil && got == c.want, err
		})
		if err != nil {
			t.Errorf("%s may %s %s/%s (group %q): %v, want %v", sa, c.verb, c.resource, c.sub, c.group, got, c.want)
		}
	}
}

// allowed asks the apiserver, as `kubectl auth can-i --as` does.
func allowed(ctx context.Context, cs kubernetes.Interface, user, ns, verb, group, resource, sub string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub,
		},
	}}
	out, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return out.Status.Allowed, nil
}
