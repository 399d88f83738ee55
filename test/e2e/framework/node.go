package framework

import "testing"

// NodeKubeconfig returns a kubeconfig for system:node:<nodeName> (group system:nodes) with a
// client certificate minted from the cluster CA: what the Node authorizer and NodeRestriction
// grant that node, and nothing from RBAC. Node agents in tests run with it, so every test
// proves the agent works within a node's rights.
func NodeKubeconfig(t testing.TB, nodeName string) string {
	t.Helper()
	path, err := Cluster().NodeKubeconfig(nodeName)
	if err != nil {
		t.Fatalf("node credential for %s: %v", nodeName, err)
	}
	return path
}
