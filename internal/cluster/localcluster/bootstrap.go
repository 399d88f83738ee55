package localcluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NodeBootstrapGroup is the extra group of the bootstrap tokens a local cluster issues to
// its node agents.
const NodeBootstrapGroup = "system:bootstrappers:kubevol:node"

// nodeBootstrapBindings are upstream's TLS bootstrap bindings (kubeadm names them
// kubeadm:kubelet-bootstrap, kubeadm:node-autoapprove-bootstrap and
// kubeadm:node-autoapprove-certificate-rotation): a bootstrap token may file CSRs and have
// kube-controller-manager approve a node client certificate, and a node may renew its own.
var nodeBootstrapBindings = []struct{ name, role, group string }{
	{"kubevol:node-bootstrapper", "system:node-bootstrapper", NodeBootstrapGroup},
	{"kubevol:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", NodeBootstrapGroup},
	{"kubevol:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
}

// WriteNodeBootstrapKubeconfig issues a bootstrap token that expires after ttl (a Secret
// bootstrap-token-<id> in kube-system; kube-controller-manager's token cleaner deletes it
// then) and writes a kubeconfig with it to path, readable by its owner only. With it a node
// agent obtains its system:node:<name> certificate through a CSR that kube-controller-manager
// approves and signs.
//
// Whoever holds the token can request any node's certificate (NodeRestriction does not
// check a bootstrap identity), which is acceptable for one machine whose admin kubeconfig
// sits beside it, not for a cluster of several nodes (see kubevol csr-approver).
func (c *Cluster) WriteNodeBootstrapKubeconfig(ctx context.Context, path string, ttl time.Duration) error {
	_, err := WriteNodeBootstrapKubeconfig(ctx, c.RESTConfig(), path, ttl)
	return err
}

// BootstrapToken is what WriteNodeBootstrapKubeconfig created, so that a short-lived user
// (a benchmark) can delete it again.
type BootstrapToken struct {
	// ID is the token's public half: its Secret is kube-system/bootstrap-token-<ID>, and
	// the CSRs filed with it are from user system:bootstrap:<ID>.
	ID string
	// Bindings are the ClusterRoleBindings that did not exist before.
	Bindings []string
}

// SecretName is the token's Secret in kube-system.
func (t BootstrapToken) SecretName() string { return "bootstrap-token-" + t.ID }

// Username is the user the API server authenticates the token as.
func (t BootstrapToken) Username() string { return "system:bootstrap:" + t.ID }

// WriteNodeBootstrapKubeconfig is the method's work against any cluster that admin (a
// cluster-admin config) reaches and whose kube-controller-manager signs node client
// certificates: the bindings of upstream's TLS bootstrap for the token's group, the token,
// and a kubeconfig with admin's server and CA.
func WriteNodeBootstrapKubeconfig(ctx context.Context, admin *rest.Config, path string, ttl time.Duration) (BootstrapToken, error) {
	var tok BootstrapToken
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return tok, err
	}
	caPEM := admin.CAData
	if len(caPEM) == 0 && admin.CAFile != "" {
		if caPEM, err = os.ReadFile(admin.CAFile); err != nil {
			return tok, err
		}
	}
	for _, b := range nodeBootstrapBindings {
		_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.group}},
		}, metav1.CreateOptions{})
		switch {
		case err == nil:
			tok.Bindings = append(tok.Bindings, b.name)
		case !apierrors.IsAlreadyExists(err):
			return tok, fmt.Errorf("binding %s: %w", b.name, err)
		}
	}
	id, secret := randomToken(6), randomToken(16)
	_, err = client.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "kubevol node agent bootstrap",
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              NodeBootstrapGroup,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return tok, fmt.Errorf("bootstrap token: %w", err)
	}
	tok.ID = id
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["kubelet-bootstrap"] = &clientcmdapi.AuthInfo{Token: id + "." + secret}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: "kubelet-bootstrap"}
	cfg.CurrentContext = contextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return tok, err
	}
	return tok, writeFileAtomic(path, data, 0o600)
}

// randomToken is n characters of [a-z0-9], the bootstrap token alphabet.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		var r [1]byte
		for {
			_, _ = rand.Read(r[:])
			if int(r[0]) < 252 { // 252 = 7*36: no modulo bias
				break
			}
		}
		b[i] = alphabet[int(r[0])%len(alphabet)]
	}
	return string(b)
}
