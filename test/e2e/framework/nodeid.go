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
