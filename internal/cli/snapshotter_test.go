package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSnapshotterFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--snapshot-controller=false", "--csi-snapshotter=false"}, "leave nothing to run"},
		{[]string{"--snapshot-name-prefix="}, "--snapshot-name-prefix must not be empty"},
		{[]string{"--snapshot-name-uuid-length=0"}, "--snapshot-name-uuid-length must be -1 or between 1 and 32, got 0"},
		{[]string{"--snapshot-name-uuid-length=33"}, "got 33"},
		{[]string{"--resync-period=0s"}, "--resync-period must be positive"},
		{[]string{"--retry-crd-interval-max=0s"}, "--retry-crd-interval-max must be positive"},
		{[]string{"--worker-threads=0"}, "--worker-threads must be between 1 and 10000"},
		{[]string{"--feature-gates=Bogus=true"}, "unrecognized feature gate: Bogus"},
		{[]string{"--http-endpoint=:8080", "--metrics-address=:8081"}, "only one of --metrics-address and --http-endpoint can be set"},
		{[]string{"--node-deployment"}, "--node-deployment needs the NODE_NAME environment variable"},
		{[]string{"--node-deployment", "--leader-election"}, "--node-deployment and --leader-election exclude each other"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			if strings.Contains(tc.want, "exclude") {
				t.Setenv("NODE_NAME", "node-1")
			} else {
				t.Setenv("NODE_NAME", "")
			}
			var stdout, stderr bytes.Buffer
			code := Execute(append([]string{"snapshotter"}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.want) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.want)
			}
		})
	}
}

// The flags of both upstream binaries, with their defaults.
func TestSnapshotterFlagsMatchUpstream(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"snapshotter", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	help := stdout.String()
	for _, want := range []string{"--csi-address string", "--timeout duration", "(default 1m0s)", "--worker-threads int", "(default 10)",
		"--resync-period duration", "(default 15m0s)", "--snapshot-name-prefix string", `(default "snapshot")`, "--snapshot-name-uuid-length int",
		"--extra-create-metadata", "--prevent-volume-mode-conversion", "--retry-crd-interval-max duration", "(default 30s)",
		"--leader-election-namespace", "--leader-election-labels", "--http-endpoint", "--metrics-path", "--retry-interval-start", "--retry-interval-max",
		"--kube-api-qps", "--kube-api-burst", "--feature-gates", "--groupsnapshot-name-prefix", "--snapshot-controller", "--csi-snapshotter"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestBenchSnapshotGroupFlags(t *testing.T) {
	cmd := newBenchSnapshotCommand()
	cmd.SetArgs([]string{"--group", "--members", "0"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	var ue *UsageError
	if err := cmd.Execute(); !errors.As(err, &ue) {
		t.Errorf("--group --members 0: %v, want a usage error", err)
	}
}
