package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestProvisionerFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--volume-name-uuid-length=0"}, "--volume-name-uuid-length must be between 1 and 32, or -1"},
		{[]string{"--volume-name-uuid-length=33"}, "--volume-name-uuid-length must be between 1 and 32"},
		{[]string{"--volume-name-prefix="}, "--volume-name-prefix"},
		{[]string{"--volume-name-prefix=PVC_"}, "--volume-name-prefix"},
		{[]string{"--timeout=0s"}, "--timeout must be positive"},
		{[]string{"--retry-interval-start=10s", "--retry-interval-max=1s"}, "must not be less than --retry-interval-start"},
		{[]string{"--worker-threads=0"}, "--worker-threads must be between 1 and 10000"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps must be non-zero"},
		{[]string{"--http-endpoint=:8080", "--metrics-address=:8081"}, "only one of --metrics-address and --http-endpoint can be set"},
		{[]string{"--metrics-path=metrics"}, "--metrics-path"},
		{[]string{"--leader-election", "--leader-election-renew-deadline=20s"}, "--leader-election-lease-duration (15s) > --leader-election-renew-deadline (20s)"},
		{[]string{"--capacity-ownerref-level=3"}, "--capacity-ownerref-level must be -1, 0, 1 or 2"},
		{[]string{"--feature-gates=Nope=true"}, "unrecognized feature gate: Nope"},
		{[]string{"--feature-gates=Topology=maybe"}, "invalid value of Topology"},
		{[]string{"--timeout=soon"}, "invalid argument"},
		{[]string{"--leader-election-labels=a=b"}, `"a=b" is not key:value`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			t.Setenv("NAMESPACE", "")
			var stdout, stderr bytes.Buffer
			code := Execute(append([]string{"provisioner"}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.Contains(first, tc.want) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.want)
			}
		})
	}
}

func TestProvisionerCapacityNeedsNamespace(t *testing.T) {
	t.Setenv("NAMESPACE", "")
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"provisioner", "--enable-capacity"}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "NAMESPACE") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

func TestProvisionerVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"provisioner", "--version"}, &stdout, &stderr); code != exitOK || !strings.HasPrefix(stdout.String(), "kubevol ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

func TestBenchProvisionFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--count=0"}, "--count must be at least 1"},
		{[]string{"--storage-class=x", "--precreate"}, "--precreate needs the benchmark's own provisioner"},
		{[]string{"--driver=tape"}, `--driver "tape"`},
	} {
		var stdout, stderr bytes.Buffer
		code := Execute(append([]string{"bench", "provision"}, tc.args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, stderr.String())
		}
	}
}

// The library's validation names fields; what the user reads names the flags, including
// the sidecar-specific names of the shared fields.
func TestSidecarErrorsNameFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"provisioner", "--resync=0s"}, "--resync must be positive"},
		{[]string{"provisioner", "--csi-address="}, "--csi-address must not be empty"},
		{[]string{"provisioner", "--leader-election-retry-period=0s"}, "--leader-election-retry-period must be positive"},
		{[]string{"provisioner", "--kube-api-qps=1", "--kube-api-burst=0"}, "--kube-api-qps must be non-zero (negative disables client-side throttling) and --kube-api-burst at least 1"},
		{[]string{"attacher", "--resync=0s"}, "--resync must be positive"},
		{[]string{"attacher", "--worker-threads=0"}, "--worker-threads must be between 1 and 10000"},
		{[]string{"resizer", "--resync-period=0s"}, "--resync-period must be positive"},
		{[]string{"resizer", "--workers=0"}, "--workers must be between 1 and 10000"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			var stdout, stderr bytes.Buffer
			code := Execute(tc.args, &stdout, &stderr)
			first, _, _ := strings.Cut(stderr.String(), "\n")
			if code != exitUsage || !strings.Contains(first, tc.want) {
				t.Errorf("exit %d, first stderr line %q; want exit %d and %q", code, first, exitUsage, tc.want)
			}
			for _, field := range []string{"Resync", "WorkerThreads", "CSIAddress", "KubeAPI", "LeaderElection."} {
				if strings.Contains(first, field) {
					t.Errorf("%q names the field %s instead of its flag", first, field)
				}
			}
		})
	}
}
