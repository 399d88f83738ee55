package sidecar

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csiclient"
	"github.com/kubevol/kubevol/internal/memdriver"
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
