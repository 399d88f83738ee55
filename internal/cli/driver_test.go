package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDriverRefusesStateWithoutRecords is the operator's mistake of the data-loss report,
// made from the command line: the record file is gone while volume data is present. The
// driver must exit with an error that names the file and the recovery, and leave the data.
func TestDriverRefusesStateWithoutRecords(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the driver needs root (loop devices, mounts)")
	}
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	data := filepath.Join(stateDir, "volumes", "v-0123", "precious")
	if err := os.MkdirAll(filepath.Dir(data), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Execute([]string{"driver", "--endpoint", "unix://" + filepath.Join(dir, "csi.sock"), "--node-id", "n1", "--state-dir", stateDir}, &stdout, &stderr)
	if code == exitOK {
		t.Fatalf("the driver started on data without records; stderr:\n%s", stderr.String())
	}
	for _, want := range []string{filepath.Join(stateDir, "controller.json"), "--recover=quarantine"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr.String())
		}
	}
	if b, err := os.ReadFile(data); err != nil || string(b) != "keep me" {
		t.Fatalf("the data is gone: %q %v", b, err)
	}

	stderr.Reset()
	code = Execute([]string{"driver", "--endpoint", "unix://" + filepath.Join(dir, "csi.sock"), "--node-id", "n1", "--state-dir", stateDir, "--recover", "delete"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "--recover") {
		t.Fatalf("--recover=delete: exit code %d, stderr:\n%s", code, stderr.String())
	}
}

// TestDriverCapacityFlag: a pool size that int64 cannot hold (8Ei is stored as exactly its
// largest value, 1e30 reads as 0 through Quantity.Value, 9223372036854775808 as negative)
// is a bad flag, not a pool of a wrapped size.
func TestDriverCapacityFlag(t *testing.T) {
	for _, c := range []string{"8Ei", "1e30", "9223372036854775808", "0", "-1Gi"} {
		var stdout, stderr bytes.Buffer
		code := Execute([]string{"driver", "--endpoint", "unix:///nonexistent/csi.sock", "--node-id", "n1", "--state-dir", t.TempDir(), "--capacity", c}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--capacity") {
			t.Errorf("--capacity %s: exit code %d, stderr %q", c, code, stderr.String())
		}
	}
}
