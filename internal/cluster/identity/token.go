package identity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubevol/kubevol/internal/runtime/atomicfile"
)

// Kubeconfig is a kubeconfig file whose only credential is a bound token of a
// ServiceAccount, kept in a token file beside it (tokenFile). Clients built from it re-read
// the token file (client-go reloads it about every minute), so Refresh can replace the
// token under a running process. Both files are mode 0600; the token is never logged.
type Kubeconfig struct {
	// Path of the kubeconfig.
	Path string
	// Expiry is the lifetime requested for each token.
	Expiry time.Duration

	cs        kubernetes.Interface
	ns, sa    string
	tokenFile string
}

// WriteKubeconfig requests a token of ServiceAccount ns/sa with lifetime expiry and writes
// dir/<sa>.kubeconfig for the API server of cluster, authenticating with it.
func WriteKubeconfig(ctx context.Context, cs kubernetes.Interface, cluster *clientcmdapi.Cluster, ns, sa, dir string, expiry time.Duration) (*Kubeconfig, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k := &Kubeconfig{Path: filepath.Join(dir, sa+".kubeconfig"), Expiry: expiry, cs: cs, ns: ns, sa: sa, tokenFile: filepath.Join(dir, sa+".token")}
	if err := k.Refresh(ctx); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = cluster
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{TokenFile: k.tokenFile}
	cfg.Contexts[sa] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: sa, Namespace: ns}
	cfg.CurrentContext = sa
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(k.Path, data, 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// Refresh writes a new token to the token file.
func (k *Kubeconfig) Refresh(ctx context.Context) error {
	secs := int64(k.Expiry / time.Second)
	tr, err := k.cs.CoreV1().ServiceAccounts(k.ns).CreateToken(ctx, k.sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("TokenRequest for %s/%s: %w", k.ns, k.sa, err)
	}
	return atomicfile.Write(k.tokenFile, []byte(tr.Status.Token), 0o600)
}

// KeepFresh refreshes the token at half its lifetime until ctx ends; a failed refresh is
// retried a minute later and reported to onError (without the token).
func (k *Kubeconfig) KeepFresh(ctx context.Context, onError func(error)) {
	next := k.Expiry / 2
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		next = k.Expiry / 2
		if err := k.Refresh(ctx); err != nil && ctx.Err() == nil {
			onError(err)
			next = time.Minute
		}
	}
}

// ClusterOf is the cluster entry of a kubeconfig's current context: the API server and CA
// that a ServiceAccount's kubeconfig points to, without the admin's credentials.
func ClusterOf(kubeconfig string) (*clientcmdapi.Cluster, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return nil, err
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	if cur == nil || cfg.Clusters[cur.Cluster] == nil {
		return nil, fmt.Errorf("%s has no current cluster", kubeconfig)
	}
	return cfg.Clusters[cur.Cluster], nil
}
