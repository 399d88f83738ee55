package node_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/csrapprover"
	"github.com/kubevol/kubevol/internal/component/nodeagent/nodecert"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// csrsFor lists the CSRs whose request names the node.
func csrsFor(t *testing.T, cs kubernetes.Interface, nodeName string) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	l, err := cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range l.Items {
		b, _ := pem.Decode(c.Spec.Request)
		if b == nil {
			continue
		}
		if r, err := x509.ParseCertificateRequest(b.Bytes); err == nil && r.Subject.CommonName == "system:node:"+nodeName {
			out = append(out, c)
		}
	}
	return out
}

func fileMode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// whoAmI is the user the API server sees for cfg.
func whoAmI(t *testing.T, cfg *rest.Config) authenticationv1.UserInfo {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	return r.Status.UserInfo
}

// TestNodeBootstrap runs the agent with only a bootstrap token: it files a CSR for
// system:node:<name>, kube-controller-manager approves and signs it, and the agent
// registers its Node as that node. A restart reuses the certificate.
func TestNodeBootstrap(t *testing.T) {
	boot := framework.NodeBootstrapKubeconfig(t)
	kc := filepath.Join(t.TempDir(), "node.kubeconfig")
	a := startAgent(t, "--kubeconfig", kc, "--bootstrap-kubeconfig", boot)

	if m := fileMode(t, kc); m != 0o600 {
		t.Errorf("kubeconfig mode %o", m)
	}
	pemPath := filepath.Join(a.root, "pki", "kubevol-client-current.pem")
	if m := fileMode(t, pemPath); m != 0o600 {
		t.Errorf("%s mode %o", pemPath, m)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if u := whoAmI(t, cfg); u.Username != "system:node:"+a.name || len(u.Groups) == 0 || u.Groups[0] != "system:nodes" {
		t.Errorf("the agent's credential is %s %v", u.Username, u.Groups)
	}
	csrs := csrsFor(t, a.client, a.name)
	if len(csrs) != 1 {
		t.Fatalf("%d CSRs for %s, want 1", len(csrs), a.name)
	}
	c := csrs[0]
	if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(c.Spec.Username, "system:bootstrap:") {
		t.Errorf("CSR %s: signer %s, requested by %s", c.Name, c.Spec.SignerName, c.Spec.Username)
	}
	approved := false
	for _, cond := range c.Status.Conditions {
		approved = approved || (cond.Type == certificatesv1.CertificateApproved && cond.Reason == "AutoApproved")
	}
	if !approved {
		t.Errorf("CSR %s not auto-approved by kube-controller-manager: %+v", c.Name, c.Status.Conditions)
	}
	// The Node authorizer applies: a Secret no pod of this node uses is out of reach.
	nodeClient, _ := kubernetes.NewForConfig(cfg)
	if _, err := nodeClient.CoreV1().Secrets(a.ns).Get(a.ctx(time.Minute), "unrelated", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("GET of an unrelated Secret as the node: %v, want Forbidden", err)
	}

	// A restart finds the certificate and files no new CSR.
	a.proc.Kill()
	a.proc.Start()
	err = wait.PollUntilContextTimeout(a.ctx(time.Minute), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(a.proc.LogPath)
		return strings.Count(string(data), `"Node registered"`) == 2, nil
	})
	if err != nil {
		t.Fatalf("agent not registered again after a restart: %v", err)
	}
	if n := len(csrsFor(t, a.client, a.name)); n != 1 {
		t.Errorf("%d CSRs after a restart, want still 1", n)
	}

	// A renewal, as the agent's certificate manager files it at its deadline: the node asks
	// for its own next certificate, and kube-controller-manager approves it (selfnodeclient).
	renew := nodecert.New(nodecert.Config{NodeName: a.name, Kubeconfig: kc, CertDir: filepath.Join(a.root, "pki"), IssueTimeout: time.Minute})
	if err := renew.Rotate(a.ctx(time.Minute)); err != nil {
		t.Fatalf("renewal as the node: %v", err)
	}
	csrs = csrsFor(t, a.client, a.name)
	if len(csrs) != 2 {
		t.Fatalf("%d CSRs after a renewal, want 2", len(csrs))
	}
	renewed := false
	for _, c := range csrs {
		renewed = renewed || (c.Spec.Username == "system:node:"+a.name && len(c.Status.Certificate) > 0)
	}
	if !renewed {
		t.Errorf("no renewal CSR filed and issued for system:node:%s", a.name)
	}
	if u := whoAmI(t, cfg); u.Username != "system:node:"+a.name {
		t.Errorf("after the renewal the agent's credential is %s", u.Username)
	}

	raw, _ := os.ReadFile(boot)
	bootCfg, _ := clientcmd.Load(raw)
	for _, ai := range bootCfg.AuthInfos {
		_, secret, _ := strings.Cut(ai.Token, ".")
		logs, _ := os.ReadFile(a.proc.LogPath)
		nodeKC, _ := os.ReadFile(kc)
		if secret == "" || strings.Contains(string(logs), secret) || strings.Contains(string(nodeKC), secret) {
			t.Errorf("the bootstrap token's secret is in the agent's log or its kubeconfig (or empty: %q)", secret)
		}
	}
}

// TestNodeAgentCannotObtainOtherNodesCertificate is the DaemonSet path: an agent
// authenticates with the token of its pod on node A. kubevol csr-approver approves its
// request for system:node:A-kubevol and denies one for B-kubevol, or for A itself.
func TestNodeAgentCannotObtainOtherNodesCertificate(t *testing.T) {
	cs := framework.Client(t)
	ctx := framework.Context(t, 3*time.Minute)
	ns := framework.Namespace(t)
	const sa = "agent"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// As deploy/node: the agents' service account may file CSRs (upstream's role), nothing more.
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-node-bootstrapper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	framework.StartKubevol(t, "csr-approver", "--kubeconfig", framework.RunAs(ctx, t, ns, "csr-approver", framework.CSRApprover), "--service-account", ns+":"+sa, "-v", "4")

	nodeA, nodeB := "kv-a-"+rand.String(6), "kv-b-"+rand.String(6)
	// The agent's pod, bound to node A; nothing runs it, its token is all that matters.
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevol-node-a"},
		Spec: corev1.PodSpec{NodeName: nodeA, ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "node", Image: "kubevol:latest"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin := framework.RESTConfig()
	podToken := &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: admin.CAFile}}
	if u := whoAmI(t, podToken); len(u.Extra[csrapprover.ExtraNodeName]) != 1 || u.Extra[csrapprover.ExtraNodeName][0] != nodeA {
		t.Fatalf("the pod's token does not carry its node: %+v", u.Extra)
	}

	request := func(node string) (*rest.Config, error) {
		dir := t.TempDir()
		return nodecert.New(nodecert.Config{NodeName: node, Kubeconfig: filepath.Join(dir, "kubeconfig"), CertDir: filepath.Join(dir, "pki"),
			Bootstrap: podToken, IssueTimeout: time.Minute}).Ensure(ctx)
	}
	for _, other := range []string{nodeB + "-kubevol", nodeA} {
		_, err := request(other)
		if !errors.Is(err, nodecert.ErrDenied) || !strings.Contains(err.Error(), "NodeMismatch") {
			t.Errorf("node A's agent asking for %s: %v, want a NodeMismatch denial", other, err)
		}
		for _, c := range csrsFor(t, cs, other) {
			if len(c.Status.Certificate) > 0 {
				t.Errorf("CSR %s for %s was issued", c.Name, other)
			}
			// Events of cluster-scoped objects go to the default namespace.
			var seen []corev1.Event
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.Name})
				if err != nil {
					return false, nil
				}
				seen = evs.Items
				return len(seen) > 0 && seen[0].Reason == "CSRDenied" && strings.Contains(seen[0].Message, nodeA), nil
			})
			if err != nil {
				t.Errorf("no CSRDenied event naming node %s on %s: %+v", nodeA, c.Name, seen)
			}
		}
	}
	cfg, err := request(nodeA + "-kubevol")
	if err != nil {
		t.Fatalf("node A's agent asking for its own companion node: %v", err)
	}
	if u := whoAmI(t, cfg); u.Username != "system:node:"+nodeA+"-kubevol" {
		t.Errorf("issued identity %s", u.Username)
	}
}
