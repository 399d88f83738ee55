package localcluster

import (
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const contextName = "kubevol-local"

// Kubeconfig renders a self-contained kubeconfig (certificates embedded) for id against the
// apiserver at server, so it keeps working when copied elsewhere on this machine.
func (p *PKI) Kubeconfig(server string, id Identity) ([]byte, error) {
	caPEM, err := os.ReadFile(p.CAFile())
	if err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(p.CertFile(id.Name))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(p.KeyFile(id.Name))
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[id.User] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: id.User}
	cfg.CurrentContext = contextName
	return clientcmd.Write(*cfg)
}

// WriteKubeconfig writes Kubeconfig(server, id) to path, readable by its owner only.
func (p *PKI) WriteKubeconfig(path, server string, id Identity) error {
	data, err := p.Kubeconfig(server, id)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

// RESTConfig builds a client config for id directly from the PKI files.
func (p *PKI) RESTConfig(server string, id Identity) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   p.CAFile(),
			CertFile: p.CertFile(id.Name),
			KeyFile:  p.KeyFile(id.Name),
		},
	}
}
