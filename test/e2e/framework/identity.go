package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubevol/kubevol/internal/localcluster"
)

// Component is a kubevol component whose RBAC deploy/ ships: the value of the
// app.kubernetes.io/component label on its objects.
type Component string

// The components with RBAC in deploy/, and the folder of each.
const (
	Provisioner        Component = "provisioner"
	Attacher           Component = "attacher"
	Resizer            Component = "resizer"
	CSISnapshotter     Component = "csi-snapshotter"
	SnapshotController Component = "snapshot-controller"
	CSRApprover        Component = "csr-approver"
)

var componentDir = map[Component]string{
	Provisioner: "provisioner", Attacher: "attacher", Resizer: "resizer",
	CSISnapshotter: "snapshotter", SnapshotController: "snapshotter", CSRApprover: "approver",
}

// Rules is RBAC to bind to a test's ServiceAccount: cluster-wide rules (a ClusterRole) and
// rules in the ServiceAccount's namespace (a Role).
type Rules struct {
	Cluster, Namespaced []rbacv1.PolicyRule
}

// ShippedRules reads the rules deploy/ ships for c: every ClusterRole and Role of c's
// folder labelled app.kubernetes.io/component=c.
func ShippedRules(t testing.TB, c Component) Rules {
	t.Helper()
	dir, ok := componentDir[c]
	if !ok {
		t.Fatalf("no RBAC of component %q in deploy/", c)
	}
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", dir, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out Rules
	for _, doc := range YAMLDocuments(t, data) {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := utilyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("deploy/%s/rbac.yaml: %v", dir, err)
		}
		if meta.Metadata.Labels["app.kubernetes.io/component"] != string(c) {
			continue
		}
		var role rbacv1.ClusterRole // a Role has the same rules field
		switch meta.Kind {
		case "ClusterRole", "Role":
			if err := utilyaml.Unmarshal(doc, &role); err != nil {
				t.Fatalf("deploy/%s/rbac.yaml: %v", dir, err)
			}
		default:
			continue
		}
		if meta.Kind == "ClusterRole" {
			out.Cluster = append(out.Cluster, role.Rules...)
		} else {
			out.Namespaced = append(out.Namespaced, role.Rules...)
		}
	}
	if len(out.Cluster)+len(out.Namespaced) == 0 {
		t.Fatalf("deploy/%s/rbac.yaml has no role of component %q", dir, c)
	}
	return out
}

// YAMLDocuments splits a multi-document YAML file into its non-empty documents.
func YAMLDocuments(t testing.TB, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
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
	var rules Rules
	for _, c := range components {
		r := ShippedRules(t, c)
		rules.Cluster = append(rules.Cluster, r.Cluster...)
		rules.Namespaced = append(rules.Namespaced, r.Namespaced...)
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
	bg := context.Background()
	sa, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", ns, name, err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}}
	// Cluster-scoped names carry the namespace: tests run in parallel.
	object := "e2e:" + ns + ":" + name
	if len(rules.Cluster) > 0 {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: object}, Rules: rules.Cluster}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create ClusterRole %s: %v", object, err)
		}
		t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(bg, object, metav1.DeleteOptions{}) })
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: object}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: object}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create ClusterRoleBinding %s: %v", object, err)
		}
		t.Cleanup(func() { _ = cs.RbacV1().ClusterRoleBindings().Delete(bg, object, metav1.DeleteOptions{}) })
	}
	if len(rules.Namespaced) > 0 {
		_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules.Namespaced}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create Role %s/%s: %v", ns, name, err)
		}
		_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create RoleBinding %s/%s: %v", ns, name, err)
		}
	}
	waitAuthorized(ctx, t, cs, ns, sa.Name, rules)
	return tokenKubeconfig(ctx, t, cs, ns, sa.Name)
}

// waitAuthorized waits until the authorizer grants the ServiceAccount the first rule of
// each role: RBAC reaches the authorizer through an informer, a moment after the write.
func waitAuthorized(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns, sa string, rules Rules) {
	t.Helper()
	user := "system:serviceaccount:" + ns + ":" + sa
	var probes []authorizationv1.ResourceAttributes
	for _, set := range []struct {
		rules []rbacv1.PolicyRule
		ns    string
	}{{rules.Cluster, ""}, {rules.Namespaced, ns}} {
		for _, r := range set.rules {
			if len(r.APIGroups) > 0 && len(r.Resources) > 0 && len(r.Verbs) > 0 && len(r.ResourceNames) == 0 {
				res, sub, _ := strings.Cut(r.Resources[0], "/")
				probes = append(probes, authorizationv1.ResourceAttributes{Namespace: set.ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: res, Subresource: sub})
				break
			}
		}
	}
	for _, p := range probes {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}, ResourceAttributes: &p}}, metav1.CreateOptions{})
			return err == nil && sar.Status.Allowed, nil
		})
		if err != nil {
			t.Fatalf("%s is not granted %s %s/%s after binding its RBAC", user, p.Verb, p.Resource, p.Subresource)
		}
	}
}

// tokenKubeconfig writes a kubeconfig for the cluster whose only credential is a bound
// token of the ServiceAccount, in a file the client reads (tokenFile), mode 0600.
func tokenKubeconfig(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns, sa string) string {
	t.Helper()
	expiry := int64(6 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, sa, err)
	}
	admin, err := clientcmd.LoadFromFile(Cluster().KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cur := admin.Contexts[admin.CurrentContext]
	if cur == nil || admin.Clusters[cur.Cluster] == nil {
		t.Fatalf("admin kubeconfig has no current cluster")
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, sa+".token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = admin.Clusters[cur.Cluster]
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts[sa] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: sa, Namespace: ns}
	cfg.CurrentContext = sa
	path := filepath.Join(dir, sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ServiceAccountUser is the user name of ServiceAccount ns/name.
func ServiceAccountUser(ns, name string) string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
}
