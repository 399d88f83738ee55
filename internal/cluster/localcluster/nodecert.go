package localcluster

import "path/filepath"

// NodeIdentity is the client certificate subject of a node: user system:node:<name> in
// group system:nodes, which the Node authorizer and NodeRestriction recognise.
func NodeIdentity(nodeName string) Identity {
	return Identity{Name: "node-" + nodeName, User: "system:node:" + nodeName, Groups: []string{"system:nodes"}}
}

// NodeKubeconfig mints a client certificate for system:node:<nodeName> straight from the
// cluster CA and writes a kubeconfig for it, returning its path. It is a harness shortcut
// for tests and benchmarks; a real node obtains its certificate through a
// CertificateSigningRequest.
func (c *Cluster) NodeKubeconfig(nodeName string) (string, error) {
	id := NodeIdentity(nodeName)
	if err := c.pki.EnsureClient(id); err != nil {
		return "", err
	}
	path := c.path(id.Name + ".kubeconfig")
	if err := c.pki.WriteKubeconfig(path, c.Server(), id); err != nil {
		return "", err
	}
	return filepath.Clean(path), nil
}
