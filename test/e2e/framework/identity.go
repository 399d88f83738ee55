package framework

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kubevol/kubevol/internal/cluster/identity"
)

// Component is a kubevol component whose RBAC deploy/ ships (internal/cluster/identity).
type Component = identity.Component

// The components with RBAC in deploy/.
const (
	Provisioner        = identity.Provisioner
	Attacher           = identity.Attacher
	Resizer            = identity.Resizer
	CSISnapshotter     = identity.CSISnapshotter
	SnapshotController = identity.SnapshotController
	CSRApprover        = identity.CSRApprover
)

// Rules is RBAC to bind to a test's ServiceAccount: cluster-wide rules (a ClusterRole) and
// rules in the ServiceAccount's namespace (a Role).
type Rules = identity.Rules

// ShippedRules reads the rules deploy/ ships for c: every ClusterRole and Role of c's
// folder labelled app.kubernetes.io/component=c.
func ShippedRules(t testing.TB, c Component) Rules {
	t.Helper()
	r, err := identity.ShippedRules(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// YAMLDocuments splits a multi-document YAML file into its non-empty documents.
func YAMLDocuments(t testing.TB, data []byte) [][]byte {
	t.Helper()
	docs, err := identity.YAMLDocuments(data)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// RunAs gives the test a ServiceAccount named name in namespace ns, bound to the RBAC that
// deploy/ ships for each of components (their ClusterRoles and Roles, rendered for ns and
// this ServiceAccount), and returns the path of a kubeconfig that authenticates with a
// token of that ServiceAccount (TokenRequest) and nothing else. It waits until the API
// server's authorizer has the bindings. Everything is deleted when the test ends.
//
// Run every component of a test with it: `--kubeconfig`, RunAs(...). Admin credentials
// (Client, Cluster().KubeconfigPath()) are for the test's own setup only.
func RunAs(ctx context.Context, t testing.TB, ns, name string, components ...Component) string {
	t.Helper()
	rules, err := identity.ShippedRules(components...)
	if err != nil {
		t.Fatal(err)
	}
	return RunWithRules(ctx, t, ns, name, rules)
}

// RunAsReadingSecrets is RunAs with `get` on secrets added, as an operator adds it to the
// upstream roles (which leave it commented out) for StorageClasses that name secrets.
func RunAsReadingSecrets(ctx context.Context, t testing.TB, ns, name string, c Component) string {
	t.Helper()
	rules := ShippedRules(t, c)
	rules.Cluster = append(rules.Cluster, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	return RunWithRules(ctx, t, ns, name, rules)
}

// RunWithRules is RunAs with rules given by the test (upstream's, for instance).
func RunWithRules(ctx context.Context, t testing.TB, ns, name string, rules Rules) string {
	t.Helper()
	cs := Client(t)
	// Cluster-scoped names carry the namespace: tests run in parallel.
	a := identity.Account{Namespace: ns, Name: name, ClusterName: "e2e:" + ns + ":" + name, Rules: rules}
	t.Cleanup(func() { identity.Delete(context.Background(), cs, a) })
	if err := identity.Ensure(ctx, cs, a); err != nil {
		t.Fatal(err)
	}
	cluster, err := identity.ClusterOf(Cluster().KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	// The token outlives any test; nothing refreshes it.
	k, err := identity.WriteKubeconfig(ctx, cs, cluster, ns, name, t.TempDir(), 6*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return k.Path
}

// ServiceAccountUser is the user name of ServiceAccount ns/name.
func ServiceAccountUser(ns, name string) string {
	return identity.User(ns, name)
}
