package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestResizerFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers=0"}, "--workers must be between 1 and 10000, got 0"},
		{[]string{"--worker-threads=0"}, "--workers must be between 1 and 10000, got 0"},
		{[]string{"--resync-period=0s"}, "--resync-period must be positive"},
		{[]string{"--timeout=0s"}, "--timeout must be positive"},
		{[]string{"--retry-interval-start=10s", "--retry-interval-max=1s"}, "must not be less than --retry-interval-start"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps must be non-zero"},
		{[]string{"--http-endpoint=:8080", "--metrics-address=:8081"}, "only one of --metrics-address and --http-endpoint can be set"},
		{[]string{"--handle-volume-inuse-error=maybe"}, "invalid argument"},
		{[]string{"--resync=1m"}, "unknown flag: --resync"},
		{[]string{"--feature-gates=Bogus=true"}, "unrecognized feature gate: Bogus"},
		{[]string{"--feature-gates=VolumeAttributesClass=maybe"}, "invalid value of VolumeAttributesClass"},
		{[]string{"--extra-modify-metadata=maybe"}, "invalid argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			var stdout, stderr bytes.Buffer
			code := Execute(append([]string{"resizer"}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.want) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.want)
			}
		})
	}
}

// --workers is upstream's name; the other sidecars' --worker-threads is a hidden alias.
func TestResizerFlagsMatchUpstream(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"resizer", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	help := stdout.String()
	for _, want := range []string{"--workers int", "(default 10)", "--timeout duration", "(default 10s)", "--resync-period duration", "--handle-volume-inuse-error", "(default true)",
		"--kube-api-qps float32", "(default 200)", "--kube-api-burst int", "(default 400)", "--leader-election-namespace", "--http-endpoint", "--metrics-path",
		"--extra-modify-metadata", "--feature-gates", "VolumeAttributesClass=true|false (GA - default=true)", "AnnotateFsResize=true|false (ALPHA - default=false)"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if strings.Contains(help, "--worker-threads") {
		t.Error("--worker-threads is shown; it is a hidden alias of --workers")
	}
}
