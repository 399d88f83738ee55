package framework

import (
	"path/filepath"
	"testing"
	"time"
)

// NodeBootstrapKubeconfig writes a kubeconfig with a fresh bootstrap token (valid for an
// hour) to the test's temp dir: `kubevol node --bootstrap-kubeconfig` obtains its
// system:node:<name> certificate with it, approved and signed by kube-controller-manager.
func NodeBootstrapKubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bootstrap.kubeconfig")
	if err := cluster.WriteNodeBootstrapKubeconfig(Context(t, time.Minute), path, time.Hour); err != nil {
		t.Fatalf("node bootstrap kubeconfig: %v", err)
	}
	return path
}

// NodeCredentialArgs are the flags with which a test's node agent obtains its own
// system:node:<name> identity through a CSR, as a kubelet's TLS bootstrap does: the
// kubeconfig it writes (in the test's temp dir, kept across restarts of the agent) and a
// fresh bootstrap token. Every test that runs an agent so proves the bootstrap and that the
// agent works with what the Node authorizer grants a node.
func NodeCredentialArgs(t testing.TB) []string {
	t.Helper()
	return []string{"--kubeconfig", filepath.Join(t.TempDir(), "node.kubeconfig"), "--bootstrap-kubeconfig", NodeBootstrapKubeconfig(t)}
}
