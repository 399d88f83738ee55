package pluginregistration_test

import (
	"context"
	"fmt"
	"os"

	"github.com/kubevol/kubevol/pkg/pluginregistration"
)

// printer is a Handler that prints what registers.
type printer struct{ registered chan struct{} }

func (p printer) RegisterPlugin(_ context.Context, name, endpoint string, versions []string) error {
	fmt.Println("registered", name, "at", endpoint, versions)
	close(p.registered)
	return nil
}

func (p printer) DeregisterPlugin(context.Context, string) {}

// A Registrar (the driver's side) announces a driver in a registry directory; a Watcher
// (the node's side) hands it to its Handler, as a kubelet would.
func Example() {
	dir, _ := os.MkdirTemp("", "plugins_registry-")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	r := &pluginregistration.Registrar{Dir: dir, Driver: "hostpath.csi.example.com", Endpoint: "/run/csi/hostpath.sock"}
	go func() { _ = r.Serve(ctx) }()

	h := printer{registered: make(chan struct{})}
	w := &pluginregistration.Watcher{Dir: dir, Handler: h}
	go func() { _ = w.Run(ctx) }()
	<-h.registered
	// Output: registered hostpath.csi.example.com at /run/csi/hostpath.sock [1.0.0]
}
