package kubeletnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kubevol/kubevol/internal/build/ociimage"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/proc"
)

// TestContainerdPodAndCleanup runs containerd on the node's configuration, imports the
// images built here, runs a pod sandbox and a busybox container through the CRI, as the
// kubelet would, checks that the pod has an address on the bridge and no route out, then
// stops everything and checks that Cleanup leaves no shim, mount, netns, veth, bridge or
// cgroup behind.
func TestContainerdPodAndCleanup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (containerd, mounts, network namespaces)")
	}
	if err := CheckPrerequisites(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cniDir, err := localcluster.EnsureCNIPlugins(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n, err := New(Options{Dir: dir, NodeName: "test", ClusterBinary: "/nonexistent", CNIBinDir: cniDir, Port: 1, HealthzPort: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := n.Prepare(); err != nil {
		t.Fatal(err)
	}
	c := n.Containerd()
	p, err := proc.Start(c.Name, c.Path, c.Args, filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = p.Stop(20 * time.Second)
		}
	}
	t.Cleanup(stop)
	if err := proc.WaitReady(ctx, p, time.Minute, n.RuntimeReady); err != nil {
		t.Fatalf("containerd: %v\n%s", err, proc.LogTail(p.LogPath, 20))
	}
	imgs, err := TestImages()
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "images.tar")
	if err := ociimage.WriteArchiveFile(archive, imgs...); err != nil {
		t.Fatal(err)
	}
	if err := n.Import(ctx, archive); err != nil {
		t.Fatal(err)
	}

	conn, err := n.dialCRI()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)
	logDir := filepath.Join(dir, "podlogs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sbCfg := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "uid-1"},
		LogDirectory: logDir,
		Linux:        &cri.LinuxPodSandboxConfig{CgroupParent: n.CgroupRoot() + "/pod-uid-1"},
	}
	sb, err := rs.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, proc.LogTail(p.LogPath, 20))
	}
	st, err := rs.PodSandboxStatus(ctx, &cri.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	if err != nil {
		t.Fatal(err)
	}
	ip := st.GetStatus().GetNetwork().GetIp()
	if a, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix(n.o.Subnet).Contains(a) {
		t.Errorf("pod IP %q, want one in %s", ip, n.o.Subnet)
	}
	ctr, err := rs.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg, Config: &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: "c"},
		Image:    &cri.ImageSpec{Image: BusyboxImage},
		Command:  []string{"sh", "-c", "ip route; mkdir /tmp/www; echo hello > /tmp/www/x; httpd -p 8080 -h /tmp/www; cat /tmp/www/x; sleep 600"},
		LogPath:  "c.log",
	}})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rs.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	var out string
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(filepath.Join(logDir, "c.log"))
		out = string(data)
		return strings.Contains(out, "hello"), nil
	})
	if !strings.Contains(out, "hello") {
		t.Fatalf("container output %q, want hello", out)
	}
	if strings.Contains(out, "default") {
		t.Errorf("the pod has a default route: %q", out)
	}
	// The host reaches the pod through the pods' bridge, as the kubelet's probes must: a
	// route through any other device would take the request off the machine, so the test
	// sends nothing before the route is right.
	route, err := exec.Command("ip", "route", "get", ip).CombinedOutput()
	if err != nil || !strings.Contains(string(route), "dev "+n.Bridge()+" ") {
		t.Fatalf("host route to the pod %s: %q (%v), want one through %s", ip, route, err, n.Bridge())
	}
	body, err := httpGet(ctx, "http://"+net.JoinHostPort(ip, "8080")+"/x")
	if err != nil || strings.TrimSpace(body) != "hello" {
		t.Errorf("GET of the pod's httpd from the host: %q, %v", body, err)
	}
	if len(n.mustLeftovers(t)) == 0 {
		t.Fatal("Leftovers sees nothing of a running pod")
	}

	if err := n.RemovePods(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := n.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := n.mustLeftovers(t); len(left) > 0 {
		t.Errorf("left after cleanup: %v", left)
	}
}

func (n *Node) mustLeftovers(t *testing.T) []string {
	t.Helper()
	left, err := n.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// httpGet fetches url, retrying for a few seconds while the server starts. Each try reads
// the whole body within its own request's context: the poll cancels that context when it
// returns, and a body read after that fails with "context canceled".
func httpGet(ctx context.Context, url string) (string, error) {
	var body string
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		body, err = getOnce(ctx, url)
		return err == nil, nil
	})
	return body, err
}

func getOnce(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET %s: read the body: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return string(data), fmt.Errorf("GET %s: status %s", url, resp.Status)
	}
	return string(data), nil
}
