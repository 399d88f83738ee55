package driver_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// A driver serving several sockets records, for each call, the socket it came in on: a
// test gives each caller a socket of its own and tells the callers apart in the call log.
func TestCallLogNamesTheEndpoint(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.jsonl")
	d, err := driver.New(driver.Config{StateDir: filepath.Join(dir, "state"), NodeID: "n1", Version: "test", CallLog: log})
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	var lis []net.Listener
	for _, p := range paths {
		l, err := driver.Listen("unix://" + p)
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, lis[0], lis[1:]...) }()
	for _, p := range paths {
		conn, err := grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
			t.Errorf("GetPluginInfo on %s: %v", p, err)
		}
		conn.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs, err := driver.ReadCallLog(log)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Endpoint != paths[0] || recs[1].Endpoint != paths[1] {
		t.Errorf("call log %+v, want one call on each of %v in turn", recs, paths)
	}
}
