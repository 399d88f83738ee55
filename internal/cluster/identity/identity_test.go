package identity

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}

func TestShippedRules(t *testing.T) {
	for _, c := range []Component{Provisioner, Attacher, Resizer, CSISnapshotter, SnapshotController, CSRApprover} {
		r, err := ShippedRules(c)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if len(r.Cluster) == 0 {
			t.Errorf("%s: no cluster rules", c)
		}
	}
	p, _ := ShippedRules(Provisioner)
	if !grants(p.Cluster, "", "persistentvolumeclaims", "update") || grants(p.Cluster, "", "persistentvolumeclaims", "patch") {
		t.Errorf("provisioner claims rules are not deploy/'s: %+v", p.Cluster)
	}
	if !grants(p.Namespaced, "coordination.k8s.io", "leases", "update") {
		t.Errorf("provisioner has no namespaced lease rule: %+v", p.Namespaced)
	}
	// The roles of one folder are told apart by their component label.
	csi, _ := ShippedRules(CSISnapshotter)
	ctrl, _ := ShippedRules(SnapshotController)
	if grants(csi.Cluster, "", "persistentvolumeclaims", "update") == grants(ctrl.Cluster, "", "persistentvolumeclaims", "update") &&
		len(csi.Cluster) == len(ctrl.Cluster) {
		t.Errorf("csi-snapshotter and snapshot-controller rules are the same")
	}
	both, _ := ShippedRules(CSISnapshotter, SnapshotController)
	if len(both.Cluster) != len(csi.Cluster)+len(ctrl.Cluster) {
		t.Errorf("rules of two components are not their union")
	}
	if _, err := ShippedRules("nonesuch"); err == nil {
		t.Error("an unknown component has rules")
	}
}

func TestRender(t *testing.T) {
	rules, _ := ShippedRules(Provisioner)
	a := Account{Namespace: "ns1", Name: "sa", ClusterName: "x:ns1:sa", Rules: rules, Labels: map[string]string{"l": "v"}}
	o := a.Render()
	if o.ServiceAccount.Namespace != "ns1" || o.ServiceAccount.Name != "sa" {
		t.Errorf("ServiceAccount %s/%s", o.ServiceAccount.Namespace, o.ServiceAccount.Name)
	}
	if o.ClusterRole.Name != "x:ns1:sa" || o.ClusterRoleBinding.RoleRef.Name != "x:ns1:sa" || o.ClusterRoleBinding.RoleRef.Kind != "ClusterRole" {
		t.Errorf("cluster objects %s %+v", o.ClusterRole.Name, o.ClusterRoleBinding.RoleRef)
	}
	// deploy/'s Role names kubevol-system; rendered, it is in the account's namespace.
	if o.Role.Namespace != "ns1" || o.RoleBinding.Namespace != "ns1" || o.RoleBinding.RoleRef.Name != "sa" || o.RoleBinding.RoleRef.Kind != "Role" {
		t.Errorf("namespaced objects %s/%s %+v", o.Role.Namespace, o.Role.Name, o.RoleBinding.RoleRef)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sa", Namespace: "ns1"}}
	if !slices.Equal(o.ClusterRoleBinding.Subjects, want) || !slices.Equal(o.RoleBinding.Subjects, want) {
		t.Errorf("subjects %+v %+v", o.ClusterRoleBinding.Subjects, o.RoleBinding.Subjects)
	}
	if o.Role.Labels["l"] != "v" || o.ClusterRole.Labels["l"] != "v" {
		t.Error("labels not set")
	}
	if o := (Account{Namespace: "n", Name: "s", Rules: Rules{Cluster: rules.Cluster}}).Render(); o.Role != nil || o.RoleBinding != nil {
		t.Error("a Role without namespaced rules")
	}
}

func fakeClient() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	n := 0
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		n++
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "token-" + string(rune('0'+n))}}, nil
	})
	return cs
}

// Ensure twice, as `kubevol up` does across restarts: the second updates, not fails.
func TestEnsureIdempotent(t *testing.T) {
	ctx := context.Background()
	cs := fakeClient()
	rules, _ := ShippedRules(Provisioner)
	a := Account{Namespace: "ns1", Name: "sa", ClusterName: "c", Rules: rules}
	if err := Ensure(ctx, cs, a); err != nil {
		t.Fatal(err)
	}
	// Someone edited the role: the next Ensure puts deploy/'s rules back.
	cr, _ := cs.RbacV1().ClusterRoles().Get(ctx, "c", metav1.GetOptions{})
	cr.Rules = append(cr.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	_, _ = cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{})
	if err := Ensure(ctx, cs, a); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	cr, _ = cs.RbacV1().ClusterRoles().Get(ctx, "c", metav1.GetOptions{})
	if grants(cr.Rules, "", "secrets", "get") || len(cr.Rules) != len(rules.Cluster) {
		t.Errorf("ClusterRole not updated: %+v", cr.Rules)
	}
	if _, err := cs.RbacV1().RoleBindings("ns1").Get(ctx, "sa", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	Delete(ctx, cs, a)
	if _, err := cs.CoreV1().ServiceAccounts("ns1").Get(ctx, "sa", metav1.GetOptions{}); err == nil {
		t.Error("ServiceAccount not deleted")
	}
}

func TestWriteKubeconfig(t *testing.T) {
	ctx := context.Background()
	cs := fakeClient()
	_, _ = cs.CoreV1().ServiceAccounts("ns1").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: "ns1"}}, metav1.CreateOptions{})
	dir := filepath.Join(t.TempDir(), "id")
	k, err := WriteKubeconfig(ctx, cs, &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}, "ns1", "sa", dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(k.Path)
	if err != nil {
		t.Fatal(err)
	}
	ai := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if ai.TokenFile == "" || ai.Token != "" || ai.ClientCertificate != "" || len(ai.ClientCertificateData) > 0 {
		t.Fatalf("credential is not a token file: %+v", ai)
	}
	for _, f := range []string{k.Path, ai.TokenFile} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v", f, st.Mode(), err)
		}
	}
	tok, _ := os.ReadFile(ai.TokenFile)
	if err := k.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	tok2, _ := os.ReadFile(ai.TokenFile)
	if string(tok) != "token-1" || string(tok2) != "token-2" {
		t.Errorf("tokens %q then %q", tok, tok2)
	}
}
