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
	client, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	for _, b := range nodeBootstrapBindings {
		_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.group}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding %s: %w", b.name, err)
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
		return fmt.Errorf("bootstrap token: %w", err)
	}
	caPEM, err := os.ReadFile(c.pki.CAFile())
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: c.Server(), CertificateAuthorityData: caPEM}
	cfg.AuthInfos["kubelet-bootstrap"] = &clientcmdapi.AuthInfo{Token: id + "." + secret}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: "kubelet-bootstrap"}
	cfg.CurrentContext = contextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
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
