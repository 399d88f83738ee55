package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestNodeFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"node", "--node-name", "n1", "--root-dir", "relative"}, "--root-dir must be an absolute path"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/"}, "--root-dir must not be /"},
		{[]string{"node", "--node-name", "Not_A_Name", "--root-dir", "/tmp/x"}, "--node-name"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--lease-duration", "1s"}, "--lease-duration must be at least 4s"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--kubeconfig", "/no/such/file"}, "--kubeconfig"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--register-with-taints", "a=b"}, "--register-with-taints"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--register-with-taints", "a=b:Sometimes"}, "effect must be"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--selinux-enabled", "yes"}, "want auto, true or false"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--bootstrap-kubeconfig", "in-cluster"}, "--bootstrap-kubeconfig needs --kubeconfig"},
		{[]string{"node", "--node-name", "n1", "--root-dir", "/tmp/x", "--kubeconfig", "/tmp/x/kc", "--bootstrap-kubeconfig", "/no/such/file"}, "--bootstrap-kubeconfig"},
		{[]string{"csr-approver", "--service-account", "nocolon"}, "--service-account"},
		{[]string{"csr-approver", "--service-account", "Bad_NS:x"}, "--service-account"},
		{[]string{"csr-approver", "--node-suffix", "_x"}, "--node-suffix"},
		{[]string{"csr-approver", "--workers", "0"}, "--workers must be at least 1"},
		{[]string{"bench", "node", "--pods", "0"}, "--pods must be at least 1"},
		{[]string{"bench", "node", "--volumes", "0"}, "--volumes must be between 1 and 100"},
		{[]string{"bench", "node", "--idle", "10ms"}, "--idle must be at least 1s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Execute(tc.args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr: %s", tc.args, code, exitUsage, stderr.String())
			continue
		}
		if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.wantErr) {
			t.Errorf("%v: %q does not contain %q", tc.args, first, tc.wantErr)
		}
	}
}
