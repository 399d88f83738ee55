package up

import (
	"context"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// verifyDeployed runs `kubevol verify` against the driver deploy/ runs as pods, as an
// operator checks a cluster: --kubeconfig (not up's --dir, so nothing of up's own stack is
// assumed) and --node-root-dir, the real kubelet's root on this machine, so that the cases
// that read the pods' volumes through the host's paths run too. The deployed node plugin
// mounts them in the kubelet's directory with Bidirectional propagation, so they are on the
// host as on any node. Only the cases that need the host's paths run here, plus those whose
// driver defects only the deployed driver showed (a read-only block inline volume; a
// read-only publish, whose remount never reached the host's copy of the mount); the whole
// run takes 8 minutes and its figures are in docs/conformance.md.
// deployedCases: those that read and write through the host's paths, the crash case, which
// kills the node's process (here the kubelet, which up restarts) found by its --root-dir,
// the read-only volumes, inline and claimed, and a claim made read-only by its
// VolumeAttributesClass while mounted (the split node plugin follows the controller).
var deployedCases = []string{"data/persist", "access/fsgroup", "access/readonly", "crash/node-agent", "ephemeral/inline-separate", "modify/class"}

func verifyDeployed(t *testing.T, ctx context.Context, bin, dir, kubeletRoot string) {
	t.Helper()
	junit := filepath.Join(t.TempDir(), "verify.xml")
	start := time.Now()
	args := []string{"verify", "--driver", imagesDriverName, "--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--node-root-dir", kubeletRoot, "--junit", junit, "--only", strings.Join(deployedCases, ",")}
	// KUBEVOL_E2E_VERIFY_ALL=1 runs every case, for docs/conformance.md's figures.
	if os.Getenv("KUBEVOL_E2E_VERIFY_ALL") == "1" {
		args = args[:len(args)-2]
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("kubevol verify --kubeconfig --node-root-dir on the deployed driver: %s\n%s", took.Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatalf("kubevol verify: %v", err)
	}
	raw, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(raw, &report); err != nil {
		t.Fatalf("verify's JUnit report: %v", err)
	}
	ran := map[string]bool{}
	for _, s := range report.Suites {
		for _, c := range s.Cases {
			ran[c.Name] = c.Skipped == nil
		}
	}
	for _, c := range deployedCases {
		if !ran[c] {
			t.Errorf("case %s did not run (reported: %v); its host paths are on this machine", c, ran)
		}
	}
	if strings.Contains(string(out), "needs the node's host") {
		t.Errorf("verify found no host paths under --node-root-dir %s", kubeletRoot)
	}
}
