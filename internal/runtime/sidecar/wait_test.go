package sidecar

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/testing/memdriver"
)

// A sidecar started before its driver waits for the socket, saying so periodically with
// the reason, and connects once the driver serves.
func TestWaitForDriverSaysWhyUntilTheSocketAppears(t *testing.T) {
	old := stillWaitingEvery
	stillWaitingEvery = 100 * time.Millisecond
	t.Cleanup(func() { stillWaitingEvery = old })

	sock := filepath.Join(t.TempDir(), "csi.sock")
	conn, err := csiclient.Dial(csiclient.Config{Address: sock, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lines := make(chan string, 100)
	logger := funcr.New(func(prefix, args string) {
		select {
		case lines <- args:
		default:
		}
	}, funcr.Options{})
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), time.Minute)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- waitForDriver(ctx, conn, sock) }()

	for n := 0; n < 2; n++ {
		select {
		case l := <-lines:
			if !strings.Contains(l, "Still waiting for the CSI driver") || !strings.Contains(l, "socket does not exist") || !strings.Contains(l, sock) {
				t.Fatalf("line %d: %s", n, l)
			}
		case err := <-result:
			t.Fatalf("returned before the driver served: %v", err)
		case <-ctx.Done():
			t.Fatal("no periodic line while the socket is missing")
		}
	}
	stop, err := (&memdriver.Driver{Name: "wait.test.kubevol.io"}).Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("waitForDriver: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("did not connect once the driver served")
	}
}

// A socket this process may not connect to (a root-owned 0755 socket, as some drivers make
// theirs, and a sidecar running as non-root) is named as the reason, with what to change.
func TestSocketStateNamesAPermissionProblem(t *testing.T) {
	if path := os.Getenv("KUBEVOL_SOCKETSTATE"); path != "" {
		fmt.Print(socketState(path))
		os.Exit(0)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to make a socket another user may not connect to")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir makes both 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary, copied where the other user may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "wait.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestSocketStateNamesAPermissionProblem$")
	cmd.Env = append(os.Environ(), "KUBEVOL_SOCKETSTATE="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s := string(out); !strings.Contains(s, "uid 65532, gid 65532") || !strings.Contains(s, "may not connect") || !strings.Contains(s, "owner 0:0") {
		t.Errorf("socketState as 65532 = %q", s)
	}
	if s := socketState(sock); strings.Contains(s, "may not connect") {
		t.Errorf("socketState as root = %q", s)
	}
}
