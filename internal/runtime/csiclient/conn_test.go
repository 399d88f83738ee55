package csiclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

func TestTarget(t *testing.T) {
	for in, want := range map[string]string{
		"/run/csi/socket":        "unix:///run/csi/socket",
		"unix:///run/csi/socket": "unix:///run/csi/socket",
		"unix:/run/csi/socket":   "unix:///run/csi/socket",
	} {
		if got, err := csiclient.Target(in); err != nil || got != want {
			t.Errorf("Target(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "tcp://1.2.3.4:5"} {
		if _, err := csiclient.Target(bad); err == nil {
			t.Errorf("Target(%q) succeeded", bad)
		}
	}
}

func TestConnIdentityCapabilitiesMetrics(t *testing.T) {
	d := csitest.Start(t, &csitest.Driver{Topology: true})
	reg := prometheus.NewRegistry()
	c, err := csiclient.Dial(csiclient.Config{Address: d.Address, Timeout: 5 * time.Second, Metrics: csiclient.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.ProbeForever(ctx); err != nil {
		t.Fatal(err)
	}
	name, err := c.DriverName(ctx)
	if err != nil || name != d.Name {
		t.Fatalf("DriverName = %q, %v", name, err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !caps.Plugin[csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS] || !caps.Controller[csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME] {
		t.Fatalf("caps = %+v", caps)
	}
	d.Hook("CreateVolume", func(any) error { return status.Error(codes.ResourceExhausted, "full") })
	cctx, cancel := c.WithTimeout(ctx)
	defer cancel()
	_, err = c.Controller.CreateVolume(cctx, &csi.CreateVolumeRequest{Name: "v", Secrets: map[string]string{"password": "hunter2"}})
	if status.Code(err) != codes.ResourceExhausted || csiclient.MayBeInProgress(err) {
		t.Fatalf("CreateVolume err = %v", err)
	}
	want := `csi_sidecar_operations_seconds_count{driver_name="fake.csi.kubevol.io",grpc_status_code="ResourceExhausted",method_name="/csi.v1.Controller/CreateVolume"} 1`
	out, err := testutil.CollectAndFormat(reg, expfmt.TypeTextPlain, "csi_sidecar_operations_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("metrics lack %s:\n%s", want, out)
	}
}

func TestProbeWaitsForDriver(t *testing.T) {
	d := csitest.Start(t, &csitest.Driver{})
	n := 0
	d.Hook("Probe", func(any) error {
		if n++; n < 2 {
			return status.Error(codes.Unavailable, "starting")
		}
		return nil
	})
	c, err := csiclient.Dial(csiclient.Config{Address: d.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.ProbeForever(ctx); err != nil {
		t.Fatal(err)
	}
	d.Hook("Probe", func(any) error { return status.Error(codes.FailedPrecondition, "broken") })
	if err := c.ProbeForever(ctx); err == nil {
		t.Fatal("a final Probe error must be returned")
	}
}

func TestMayBeInProgress(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.DeadlineExceeded: true, codes.Unavailable: true, codes.Aborted: true, codes.Canceled: true,
		codes.InvalidArgument: false, codes.ResourceExhausted: false, codes.Internal: false,
	} {
		if got := csiclient.MayBeInProgress(status.Error(code, "x")); got != want {
			t.Errorf("%v: %v", code, got)
		}
	}
	if !csiclient.MayBeInProgress(context.DeadlineExceeded) {
		t.Error("a non-status error may be in progress")
	}
}

func TestSanitizeDriverName(t *testing.T) {
	for in, want := range map[string]string{"local.kubevol.io": "local-kubevol-io", "a/b_c-": "a-b-c-X"} {
		if got := csiclient.SanitizeDriverName(in); got != want {
			t.Errorf("SanitizeDriverName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRequestLogStripsSecrets(t *testing.T) {
	d := csitest.Start(t, &csitest.Driver{})
	c, err := csiclient.Dial(csiclient.Config{Address: d.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := ktesting.NewConfig(ktesting.Verbosity(5), ktesting.BufferLogs(true))
	logger := ktesting.NewLogger(t, cfg)
	ctx := klog.NewContext(context.Background(), logger)
	if _, err := c.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", Secrets: map[string]string{"password": "hunter2"}}); err != nil {
		t.Fatal(err)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, "GRPC call") || !strings.Contains(logs, "***stripped***") || strings.Contains(logs, "hunter2") {
		t.Fatalf("request log must show the call with the secret stripped:\n%s", logs)
	}
}
