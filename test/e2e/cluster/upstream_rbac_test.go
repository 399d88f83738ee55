package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// rule is one (API group, resource, verb) a role grants.
type rule struct{ group, resource, verb string }

func expand(rules []rbacv1.PolicyRule) map[rule]bool {
	out := map[rule]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[rule{g, res, v}] = true
				}
			}
		}
	}
	return out
}

// documentedExtras are the rights deploy/ ships beyond upstream's, each documented: the
// attacher's optional events role (README, deploy/attacher/rbac.yaml).
var documentedExtras = map[framework.Component]map[rule]bool{
	framework.Attacher: {{"", "events", "create"}: true, {"", "events", "patch"}: true},
}

// deploy/ ships exactly upstream's rules for each sidecar, plus only the documented extras;
// and a ServiceAccount bound to them, asked what it may do (SelfSubjectRulesReview, what
// `kubectl auth can-i --list` shows), has no right beyond those.
func TestShippedRBACIsUpstreams(t *testing.T) {
	ctx := framework.Context(t, 3*time.Minute)
	ns := framework.Namespace(t)
	ups := framework.UpstreamRules(t)
	// The csr-approver has no upstream counterpart: its shipped rights are compared with
	// the review only.
	ups[framework.CSRApprover] = framework.ShippedRules(t, framework.CSRApprover)
	for comp, up := range ups {
		shipped := framework.ShippedRules(t, comp)
		for _, scope := range []struct {
			name     string
			up, ours []rbacv1.PolicyRule
		}{{"cluster", up.Cluster, shipped.Cluster}, {"namespace", up.Namespaced, shipped.Namespaced}} {
			want, got := expand(scope.up), expand(scope.ours)
			for r := range want {
				if !got[r] {
					t.Errorf("%s (%s): upstream grants %v, deploy/ does not", comp, scope.name, r)
				}
			}
			for r := range got {
				if !want[r] && !documentedExtras[comp][r] {
					t.Errorf("%s (%s): deploy/ grants %v beyond upstream's rules", comp, scope.name, r)
				}
			}
		}

		// What the ServiceAccount may really do.
		sa := strings.ReplaceAll(string(comp), "_", "-")
		kc := framework.RunAs(ctx, t, ns, sa, comp)
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		allowed := expand(append(append([]rbacv1.PolicyRule{}, shipped.Cluster...), shipped.Namespaced...))
		review, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: SelfSubjectRulesReview: %v", comp, err)
		}
		for _, rr := range review.Status.ResourceRules {
			for _, g := range rr.APIGroups {
				for _, res := range rr.Resources {
					for _, v := range rr.Verbs {
						r := rule{g, res, v}
						if !allowed[r] && !clusterDefault(r) {
							t.Errorf("%s's ServiceAccount may %s %s (group %q) in %s: not in its documented rights", comp, v, res, g, ns)
						}
					}
				}
			}
		}
		if !slices.ContainsFunc(review.Status.ResourceRules, func(rr authorizationv1.ResourceRule) bool {
			return len(rr.Resources) > 0 && !strings.HasPrefix(rr.Resources[0], "self")
		}) {
			t.Errorf("%s: the review lists none of the shipped rights: %+v", comp, review.Status.ResourceRules)
		}
	}
}

// clusterDefault reports whether every authenticated ServiceAccount has r from the API
// server's default roles: system:basic-user's self reviews, and reading ClusterTrustBundles
// (for projected trust-bundle volumes).
func clusterDefault(r rule) bool {
	if (r.group == "authorization.k8s.io" || r.group == "authentication.k8s.io") && r.verb == "create" && strings.HasPrefix(r.resource, "self") {
		return true
	}
	return r.group == "certificates.k8s.io" && r.resource == "clustertrustbundles" && (r.verb == "get" || r.verb == "list" || r.verb == "watch")
}
