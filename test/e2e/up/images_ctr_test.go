package up

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubevol/kubevol/internal/build/kubevolimages"
)

// ctrArgs are hostpath's and upstream's sample argument lists, verbatim, for each sidecar
// image. Started by `ctr run` under its entrypoint, on the host network with a service
// account's in-cluster configuration (as a pod has it) and no CSI socket, a sidecar must
// keep running and wait for its socket, and the snapshot-controller (which needs none)
// must keep serving; none may exit, let alone with 2 on a flag.
var ctrArgs = []struct {
	image, entrypoint string
	args              []string
	waits             bool // for its CSI socket
}{
	{"csi-provisioner", "/csi-provisioner", []string{"-v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true"}, true},
	{"csi-attacher", "/csi-attacher", []string{"--v=5", "--csi-address=/csi/csi.sock"}, true},
	{"csi-resizer", "/csi-resizer", []string{"-v=5", "-csi-address=/csi/csi.sock"}, true},
	{"csi-snapshotter", "/csi-snapshotter", []string{"-v=5", "--csi-address=/csi/csi.sock"}, true},
	{"snapshot-controller", "/snapshot-controller", []string{"--v=5", "--leader-election=true"}, false},
}

// checkCtrRun starts each sidecar image with `ctr run`, as a container runtime would start
// it from a manifest, through the node's containerd.
func checkCtrRun(t *testing.T, ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, socket string) {
	t.Helper()
	sa := inClusterDir(t, ctx, cfg, cs)
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ctrArgs {
		id := "kvctr-" + c.image
		ref := kubevolimages.DefaultPrefix + "/" + c.image + ":" + imagesTag
		ctr := func(args ...string) *exec.Cmd {
			return exec.Command("ctr", append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...)
		}
		var out bytes.Buffer
		cmd := ctr(append([]string{"run", "--rm", "--net-host",
			"--env", "KUBERNETES_SERVICE_HOST=" + u.Hostname(), "--env", "KUBERNETES_SERVICE_PORT=" + u.Port(),
			"--mount", "type=bind,src=" + sa + ",dst=/var/run/secrets/kubernetes.io/serviceaccount,options=rbind:ro",
			ref, id, c.entrypoint}, c.args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("ctr run %s: %v", c.image, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		exited := true
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			exited = false
			// The container, not only ctr, must go: --rm removes it once its task ends.
			_ = ctr("task", "kill", "--signal", "SIGKILL", id).Run()
			err = <-done
		}
		_ = ctr("container", "rm", id).Run() // in case --rm could not
		log := out.String()
		var exit *exec.ExitError
		code := 0
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		switch {
		case strings.Contains(log, "unknown flag") || strings.Contains(log, "flag provided but not defined") || code == 2:
			t.Errorf("%s %v: refused its arguments (exit %d):\n%s", c.image, c.args, code, log)
		case exited:
			t.Errorf("%s %v: exited (%v) instead of running:\n%s", c.image, c.args, err, log)
		case c.waits && !strings.Contains(log, "Waiting for the CSI driver"):
			t.Errorf("%s %v: does not say it waits for the socket:\n%s", c.image, c.args, log)
		}
	}
}

// inClusterDir writes what the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount
// into a directory: a token of the default ServiceAccount of namespace default (no rights:
// nothing here needs any), the cluster's CA and the namespace.
func inClusterDir(t *testing.T, ctx context.Context, cfg *rest.Config, cs kubernetes.Interface) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := cfg.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte("default")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
