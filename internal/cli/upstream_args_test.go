package cli

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// upstreamArgs are argument lists as upstream's and big drivers' manifests pass them to
// the sidecar images, verbatim: $(VAR) is expanded from env as the kubelet does. Each must
// parse and validate under the image's entrypoint name with no exit 2, and warn exactly
// about the flags listed in warn (each named by one warning line).
var upstreamArgs = []struct {
	source string // project and file, by name
	argv0  string
	args   []string
	env    map[string]string
	warn   []string
}{
	// external-provisioner v6.4.0, deploy/kubernetes/deployment.yaml
	{"external-provisioner deployment", "/csi-provisioner", []string{"--csi-address=$(ADDRESS)", "--leader-election", "--http-endpoint=:8080"},
		map[string]string{"ADDRESS": "/var/lib/csi/sockets/pluginproxy/mock.socket"}, nil},
	// external-provisioner v6.4.0, deploy/kubernetes/storage-capacity.yaml
	{"external-provisioner storage-capacity", "/csi-provisioner", []string{"--csi-address=$(ADDRESS)", "--leader-election", "--enable-capacity", "--capacity-ownerref-level=2"},
		map[string]string{"ADDRESS": "/var/lib/csi/sockets/pluginproxy/mock.socket", "NAMESPACE": "default", "POD_NAME": "csi-provisioner-0"}, nil},
	// external-snapshotter v8.7.0, deploy/kubernetes/csi-snapshotter/setup-csi-snapshotter.yaml
	{"external-snapshotter setup: provisioner", "/csi-provisioner", []string{"--v=5", "--csi-address=$(ADDRESS)"}, map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},
	{"external-snapshotter setup: csi-snapshotter", "/csi-snapshotter", []string{"--v=5", "--csi-address=$(ADDRESS)", "--leader-election=false"}, map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},
	// external-snapshotter v8.7.0, deploy/kubernetes/snapshot-controller/setup-snapshot-controller.yaml
	{"external-snapshotter snapshot-controller", "/snapshot-controller", []string{"--v=5", "--leader-election=true"}, nil, nil},
	// external-snapshotter v8.7.0, deploy/kubernetes/webhook-example/webhook.yaml
	{"external-snapshotter conversion webhook", "/snapshot-conversion-webhook", []string{"--tls-cert-file=/etc/snapshot-conversion-webhook/certs/tls.crt",
		"--tls-private-key-file=/etc/snapshot-conversion-webhook/certs/tls.key"}, nil, nil},

	// csi-driver-host-path deploy/kubernetes-1.34 (the reference's list)
	{"hostpath provisioner", "/csi-provisioner", []string{"-v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true"}, nil, nil},
	{"hostpath attacher", "/csi-attacher", []string{"--v=5", "--csi-address=/csi/csi.sock"}, nil, nil},
	{"hostpath resizer", "/csi-resizer", []string{"-v=5", "-csi-address=/csi/csi.sock"}, nil, nil},
	{"hostpath snapshotter", "/csi-snapshotter", []string{"-v=5", "--csi-address=/csi/csi.sock"}, nil, nil},
	// csi-driver-host-path distributed deploy: one provisioner per node
	{"hostpath distributed provisioner", "/csi-provisioner", []string{"-v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true", "--node-deployment=true", "--strict-topology=true", "--immediate-topology=false", "--worker-threads=5"},
		map[string]string{"NODE_NAME": "node-1"}, nil},

	// aws-ebs-csi-driver Helm chart, templates/controller.yaml (defaults rendered)
	{"aws-ebs provisioner", "/csi-provisioner", []string{"--csi-address=$(ADDRESS)", "--v=2", "--feature-gates=Topology=true", "--extra-create-metadata", "--leader-election=true", "--default-fstype=ext4"},
		map[string]string{"ADDRESS": "unix:///var/lib/csi/sockets/pluginproxy/csi.sock"}, nil},
	{"aws-ebs attacher", "/csi-attacher", []string{"--csi-address=$(ADDRESS)", "--v=2", "--leader-election=true"}, map[string]string{"ADDRESS": "unix:///var/lib/csi/sockets/pluginproxy/csi.sock"}, nil},
	{"aws-ebs snapshotter", "/csi-snapshotter", []string{"--csi-address=$(ADDRESS)", "--leader-election=true"}, map[string]string{"ADDRESS": "unix:///var/lib/csi/sockets/pluginproxy/csi.sock"}, nil},
	{"aws-ebs resizer", "/csi-resizer", []string{"--csi-address=$(ADDRESS)", "--v=2"}, map[string]string{"ADDRESS": "unix:///var/lib/csi/sockets/pluginproxy/csi.sock"}, nil},

	// azuredisk-csi-driver, deploy/csi-azuredisk-controller.yaml (single-dash forms)
	{"azuredisk provisioner", "/csi-provisioner", []string{"--feature-gates=Topology=true", "--csi-address=$(ADDRESS)", "--v=2", "--timeout=15s", "--leader-election", "--worker-threads=40", "--extra-create-metadata=true", "--strict-topology=true"},
		map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},
	{"azuredisk attacher", "/csi-attacher", []string{"-v=2", "-csi-address=$(ADDRESS)", "-timeout=600s", "-leader-election", "-worker-threads=500"}, map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},
	{"azuredisk snapshotter", "/csi-snapshotter", []string{"-csi-address=$(ADDRESS)", "-leader-election", "--v=2"}, map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},
	{"azuredisk resizer", "/csi-resizer", []string{"-csi-address=$(ADDRESS)", "-v=2", "-leader-election", "-handle-volume-inuse-error=false", "-timeout=60s"}, map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},

	// ceph-csi, deploy/rbd/kubernetes/csi-rbdplugin-provisioner.yaml
	{"ceph-csi rbd provisioner", "/csi-provisioner", []string{"--csi-address=$(ADDRESS)", "--v=1", "--timeout=150s", "--retry-interval-start=500ms", "--leader-election=true", "--feature-gates=HonorPVReclaimPolicy=true", "--prevent-volume-mode-conversion=true", "--default-fstype=ext4", "--extra-create-metadata=true", "--immediate-topology=false", "--http-endpoint=$(POD_IP):8090"},
		map[string]string{"ADDRESS": "unix:///csi/csi-provisioner.sock", "POD_IP": "10.0.0.7"}, nil},
	{"ceph-csi rbd snapshotter", "/csi-snapshotter", []string{"--csi-address=$(ADDRESS)", "--v=1", "--timeout=150s", "--leader-election=true", "--extra-create-metadata=true"}, map[string]string{"ADDRESS": "unix:///csi/csi-provisioner.sock"}, nil},
	// ceph-csi, deploy/cephfs/kubernetes/csi-cephfsplugin-provisioner.yaml
	{"ceph-csi cephfs provisioner", "/csi-provisioner", []string{"--csi-address=$(ADDRESS)", "--v=1", "--timeout=150s", "--leader-election=true", "--retry-interval-start=500ms", "--feature-gates=Topology=false", "--feature-gates=HonorPVReclaimPolicy=true", "--prevent-volume-mode-conversion=true", "--extra-create-metadata=true"},
		map[string]string{"ADDRESS": "unix:///csi/csi-provisioner.sock"}, []string{"Topology=false"}},
	{"ceph-csi cephfs resizer", "/csi-resizer", []string{"--csi-address=$(ADDRESS)", "--v=1", "--timeout=150s", "--leader-election", "--retry-interval-start=500ms", "--handle-volume-inuse-error=false", "--feature-gates=RecoverVolumeExpansionFailure=true"},
		map[string]string{"ADDRESS": "unix:///csi/csi-provisioner.sock"}, nil},
	// rook, the cephfs provisioner it deploys
	{"rook cephfs provisioner", "/csi-provisioner", []string{"--csi-address=$(ADDRESS)", "--v=0", "--timeout=2m30s", "--retry-interval-start=500ms", "--leader-election=true", "--leader-election-namespace=rook-ceph", "--leader-election-lease-duration=2m17s", "--leader-election-renew-deadline=1m47s", "--leader-election-retry-period=26s", "--default-fstype=ext4", "--extra-create-metadata=true", "--prevent-volume-mode-conversion=true", "--feature-gates=HonorPVReclaimPolicy=true", "--feature-gates=CrossNamespaceVolumeDataSource=false", "--feature-gates=Topology=false"},
		map[string]string{"ADDRESS": "unix:///csi/csi-provisioner.sock"}, []string{"Topology=false"}},

	// longhorn-manager, csi/deployment.go (the sidecars it deploys)
	{"longhorn attacher", "/csi-attacher", []string{"--v=2", "--csi-address=$(ADDRESS)", "--timeout=1m50s", "--retry-interval-max=1m", "--leader-election", "--leader-election-namespace=$(POD_NAMESPACE)", "--kube-api-qps=50", "--kube-api-burst=100", "--http-endpoint=:9503"},
		map[string]string{"ADDRESS": "/csi/csi.sock", "POD_NAMESPACE": "longhorn-system"}, nil},
	{"longhorn provisioner", "/csi-provisioner", []string{"--v=2", "--csi-address=$(ADDRESS)", "--timeout=1m50s", "--leader-election", "--leader-election-namespace=$(POD_NAMESPACE)", "--default-fstype=ext4", "--extra-create-metadata=true", "--enable-capacity", "--capacity-ownerref-level=2", "--immediate-topology=false", "--kube-api-qps=50", "--kube-api-burst=100", "--http-endpoint=:9503"},
		map[string]string{"ADDRESS": "/csi/csi.sock", "POD_NAMESPACE": "longhorn-system", "NAMESPACE": "longhorn-system", "POD_NAME": "csi-provisioner-0"}, nil},
	{"longhorn resizer", "/csi-resizer", []string{"--v=2", "--csi-address=$(ADDRESS)", "--timeout=1m50s", "--retry-interval-max=1m", "--leader-election", "--leader-election-namespace=$(POD_NAMESPACE)", "--leader-election-namespace=$(POD_NAMESPACE)", "--kube-api-qps=50", "--kube-api-burst=100", "--http-endpoint=:9503", "--handle-volume-inuse-error=false", "--feature-gates=RecoverVolumeExpansionFailure=false"},
		map[string]string{"ADDRESS": "/csi/csi.sock", "POD_NAMESPACE": "longhorn-system"}, []string{"RecoverVolumeExpansionFailure=false"}},
	{"longhorn snapshotter", "/csi-snapshotter", []string{"--v=2", "--csi-address=$(ADDRESS)", "--timeout=1m50s", "--leader-election", "--leader-election-namespace=$(POD_NAMESPACE)", "--kube-api-qps=50", "--kube-api-burst=100", "--http-endpoint=:9503", "--feature-gates=CSIVolumeGroupSnapshot=true"},
		map[string]string{"ADDRESS": "/csi/csi.sock", "POD_NAMESPACE": "longhorn-system"}, nil},

	// vSphere CSI driver, its vanilla controller manifest
	{"vsphere provisioner", "/csi-provisioner", []string{"--v=4", "--timeout=300s", "--csi-address=$(ADDRESS)", "--kube-api-qps=100", "--kube-api-burst=100", "--leader-election", "--leader-election-lease-duration=120s", "--leader-election-renew-deadline=60s", "--leader-election-retry-period=30s", "--default-fstype=ext4"},
		map[string]string{"ADDRESS": "/csi/csi.sock"}, nil},

	// The flags kubevol accepts without honouring them: one warning line each.
	{"attacher compatibility flags", "/csi-attacher", []string{"--max-grpc-log-length=200", "--automaxprocs", "--feature-gates=MutableCSINodeAllocatableCount=true", "--logging-format=text", "--log-flush-frequency=10s"},
		nil, []string{"--max-grpc-log-length", "--automaxprocs", "MutableCSINodeAllocatableCount=true"}},
	// AnnotateFsResize and --extra-modify-metadata are honoured: no warning.
	{"resizer compatibility flags", "/csi-resizer", []string{"--master=https://127.0.0.1:6443", "--automaxprocs=true", "--feature-gates=AnnotateFsResize=true,VolumeAttributesClass=true", "--extra-modify-metadata", "--log-text-split-stream", "--log-text-info-buffer-size=4Ki"},
		nil, []string{"--automaxprocs", "--log-text-split-stream", "--log-text-info-buffer-size"}},
	{"provisioner compatibility flags", "/csi-provisioner", []string{"--enable-pprof", "--cloning-protection-threads=2", "--capacity-threads=2", "--snapshot-orphan-sweep-interval=1m", "--node-deployment-immediate-binding=false", "--node-deployment-base-delay=10s", "--node-deployment-max-delay=30s", "--max-grpc-log-length=100"},
		nil, []string{"--enable-pprof", "--cloning-protection-threads", "--capacity-threads", "--snapshot-orphan-sweep-interval"}},
	// (--max-grpc-log-length is the attacher's only: the provisioner refuses it, below.)
	{"snapshot-controller compatibility flags", "/snapshot-controller", []string{"--enable-distributed-snapshotting", "--automaxprocs", "--retry-crd-interval-max=1m", "--prevent-volume-mode-conversion=false", "--feature-gates=ReleaseLeaderElectionOnExit=true"},
		nil, []string{"--automaxprocs"}},
	// --enable-distributed-snapshotting and --node-deployment are honoured: no warning.
	{"csi-snapshotter json logs", "/csi-snapshotter", []string{"--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=1Mi", "--groupsnapshot-name-prefix=g", "--node-deployment"},
		map[string]string{"NODE_NAME": "node-1"}, []string{"--log-json-info-buffer-size"}},
}

func TestUpstreamArgumentLists(t *testing.T) {
	var varRE = regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	for _, tc := range upstreamArgs {
		t.Run(tc.source, func(t *testing.T) {
			for _, k := range []string{"KUBECONFIG", "NAMESPACE", "POD_NAME", "POD_NAMESPACE", "NODE_NAME"} {
				t.Setenv(k, tc.env[k])
			}
			argv := []string{tc.argv0}
			for _, a := range tc.args {
				argv = append(argv, varRE.ReplaceAllStringFunc(a, func(m string) string { return tc.env[m[2:len(m)-1]] }))
			}
			if tc.source == "provisioner compatibility flags" {
				argv = argv[:len(argv)-1] // checked as a refusal below
			}
			code, stderr, logs := validateArgs(t, argv)
			if code != exitOK {
				t.Fatalf("%v: exit %d; stderr:\n%s\nlogs:\n%s", argv, code, stderr, logs)
			}
			var warnings []string
			for _, l := range strings.Split(logs, "\n") {
				if strings.HasPrefix(l, "W") || strings.Contains(l, "accepted for compatibility") || strings.Contains(l, "has no effect") {
					warnings = append(warnings, l)
				}
			}
			for _, w := range tc.warn {
				n := 0
				for _, l := range warnings {
					if strings.Contains(l, w) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d warning lines name %s, want 1:\n%s", n, w, strings.Join(warnings, "\n"))
				}
			}
			if len(warnings) != len(tc.warn) {
				t.Errorf("%d warning lines, want %d (%v):\n%s", len(warnings), len(tc.warn), tc.warn, strings.Join(warnings, "\n"))
			}
		})
	}
}

// Gates no upstream version has, and values a flag cannot take, exit 2 with one line that
// names them, as upstream's binaries do.
func TestBadUpstreamValuesExit2(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"csi-attacher", "--feature-gates=Topology=true"}, "unrecognized feature gate: Topology"},
		{[]string{"csi-resizer", "--feature-gates=Bogus=true"}, "unrecognized feature gate: Bogus"},
		{[]string{"csi-resizer", "--logging-format=yaml"}, `--logging-format "yaml"`},
		{[]string{"snapshot-conversion-webhook", "--tls-private-key-file=/k"}, "--tls-cert-file must be specified"},
		{[]string{"snapshot-conversion-webhook", "--tls-cert-file=/c", "--tls-private-key-file=/k", "--port=0"}, "--port 0"},
		{[]string{"csi-resizer", "--log-json-info-buffer-size=lots"}, "--log-json-info-buffer-size"},
		// kubevol's own command line stays strict: there a flag it lacks is a typo.
		{[]string{"kubevol", "provisioner", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"kubevol", "attacher", "--master=x"}, "unknown flag: --master"},
	} {
		code, stderr, _ := validateArgs(t, tc.argv)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || !strings.Contains(first, tc.want) {
			t.Errorf("%v: exit %d, first line %q; want exit 2 and %q", tc.argv, code, first, tc.want)
		}
	}
}

// A flag an entrypoint lacks (a newer upstream version's, or another sidecar's) is ignored
// with one warning line that names it and not its value; the flags around it still apply.
func TestUnknownUpstreamFlagsWarn(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	for _, tc := range []struct {
		argv []string
		warn []string
	}{
		{[]string{"csi-provisioner", "--max-grpc-log-length=100", "--csi-address=/x/csi.sock"}, []string{"--max-grpc-log-length"}},
		{[]string{"csi-provisioner", "-no-such-flag", "-v=3"}, []string{"--no-such-flag"}},
		{[]string{"csi-attacher", "--master", "https://x", "--timeout", "20s"}, []string{"--master"}},
		{[]string{"snapshot-controller", "--csi-address=/csi/csi.sock", "-x"}, []string{"--csi-address", "-x"}},
		{[]string{"csi-snapshotter", "--retry-crd-interval-max=1m", "--snapshot-controller=false"}, []string{"--retry-crd-interval-max", "--snapshot-controller"}},
		{[]string{"csi-resizer", "--new-secret-flag", "s3cr3t-value"}, []string{"--new-secret-flag"}},
	} {
		code, stderr, logs := validateArgs(t, tc.argv)
		if code != exitOK {
			t.Errorf("%v: exit %d: %s", tc.argv, code, stderr)
			continue
		}
		for _, w := range tc.warn {
			if n := strings.Count(logs, "Flag "+w+" is not a flag of kubevol's "+tc.argv[0]); n != 1 {
				t.Errorf("%v: %d warnings name %s, want 1:\n%s", tc.argv, n, w, logs)
			}
		}
		if strings.Contains(logs, "s3cr3t") || strings.Contains(logs, "https://x") {
			t.Errorf("%v: a value of an unknown flag is logged:\n%s", tc.argv, logs)
		}
	}
	// The known flags after an unknown one still parse.
	cmd := newAttacherCommand()
	setupRoot(cmd)
	kept, unknown := splitUnknownFlags(cmd, []string{"-master", "x", "-timeout", "20s", "--", "-y"})
	if strings.Join(kept, " ") != "--timeout 20s -- -y" || strings.Join(unknown, "|") != "--master x" {
		t.Errorf("splitUnknownFlags = %q, %q", kept, unknown)
	}
}

// Every form Go's flag package accepts, for long names, and the shorthands next to them.
func TestGoFlagForms(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	for _, args := range [][]string{
		{"-csi-address=/x/csi.sock", "-timeout", "20s", "-leader-election", "-v", "3"},
		{"--csi-address", "/x/csi.sock", "--timeout=20s", "--leader-election=true", "-v=3"},
		{"-csi-address", "/x/csi.sock", "--timeout", "20s", "-leader-election=false", "--v=3"},
		{"-volume-name-uuid-length", "-1", "-kube-api-qps", "-1", "-worker-threads=7"},
		{"-h"}, {"-help"}, {"--help"},
	} {
		code, stderr, _ := validateArgs(t, append([]string{"/usr/bin/csi-provisioner"}, args...))
		if code != exitOK {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if got := goFlagArgs(newProvisionerCommand(), []string{"-csi-address=/a", "-timeout", "-5s", "--", "-x"}); strings.Join(got, " ") != "--csi-address=/a --timeout -5s -- -x" {
		t.Errorf("goFlagArgs = %q", got)
	}
}

// `kubevol <role>` keeps working beside the entrypoints, and a renamed binary is kubevol.
func TestEntrypointsAndSubcommands(t *testing.T) {
	for _, argv := range [][]string{
		{"kubevol", "provisioner", "-csi-address=/x", "--version"},
		{"/usr/local/bin/kubevol-linux-amd64", "version"},
		{"kubevol", "snapshotter", "--snapshot-controller=false", "--version"},
		{"kubevol", "csi-snapshotter", "--version"},
		{"kubevol", "snapshot-controller", "--version"},
	} {
		if code, stderr, _ := validateArgs(t, argv); code != exitOK {
			t.Errorf("%v: exit %d: %s", argv, code, stderr)
		}
	}
	for _, name := range Entrypoints() {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"/" + name, "--help"}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "Usage:\n  "+name) {
			t.Errorf("/%s --help: exit %d:\n%s%s", name, code, stdout.String(), stderr.String())
		}
	}
}

// validateArgs runs argv as the process would, up to its flags' validation, and returns
// the exit code, stderr and klog's output.
func validateArgs(t *testing.T, argv []string) (int, string, string) {
	t.Helper()
	var logs bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("one_output", "true") // a warning once, not once more as info
	klog.LogToStderr(false)
	klog.SetOutput(&logs)
	defer func() {
		klog.Flush()
		klog.LogToStderr(true)
		_ = fs.Set("one_output", "false")
		_ = fs.Set("v", "0")
	}()
	var stdout, stderr bytes.Buffer
	ctx := context.WithValue(context.Background(), validateOnly{}, true)
	code := mainContext(ctx, argv, &stdout, &stderr)
	klog.Flush()
	return code, stderr.String(), logs.String() + stdout.String()
}
