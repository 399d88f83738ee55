package pluginregistration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type recordingHandler struct {
	mu      sync.Mutex
	events  []string
	refuse  error
	changed chan struct{}
}

func (h *recordingHandler) RegisterPlugin(_ context.Context, name, endpoint string, versions []string) error {
	h.record("register " + name + " " + endpoint + " " + versions[0])
	return h.refuse
}

func (h *recordingHandler) DeregisterPlugin(_ context.Context, name string) {
	h.record("deregister " + name)
}

func (h *recordingHandler) record(e string) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *recordingHandler) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		h.mu.Lock()
		for _, e := range h.events {
			if e == want {
				h.mu.Unlock()
				return
			}
		}
		got := append([]string(nil), h.events...)
		h.mu.Unlock()
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatalf("handler never saw %q; saw %q", want, got)
		}
	}
}

// A driver's registrar and the node's watcher agree on the registration API: the node learns
// the driver's endpoint, the driver learns the verdict, and removing the socket deregisters.
func TestRegisterAndDeregister(t *testing.T) {
	dir := t.TempDir()
	h := &recordingHandler{changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Watcher{Dir: dir, Handler: h}
	go func() { _ = w.Run(ctx) }()

	verdict := make(chan bool, 1)
	// The registrar logs where its caller's context says (kubevol up: a log file), also
	// for the verdict, which arrives on a gRPC call's context.
	var log syncBuffer
	rctx, stopRegistrar := context.WithCancel(klog.NewContext(ctx, textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&log)))))
	r := &Registrar{Dir: dir, Driver: "local.kubevol.io", Endpoint: "/plugins/local/csi.sock",
		OnStatus: func(ok bool, _ string) error { verdict <- ok; return nil }}
	served := make(chan error, 1)
	go func() { served <- r.Serve(rctx) }()

	h.waitFor(t, "register local.kubevol.io /plugins/local/csi.sock 1.0.0")
	select {
	case ok := <-verdict:
		if !ok {
			t.Fatal("registrar told registration failed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("registrar never got NotifyRegistrationStatus")
	}

	stopRegistrar()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if got := log.String(); !strings.Contains(got, "Registered with the node agent") {
		t.Errorf("the verdict is not in the registrar's log:\n%s", got)
	}
	if _, err := os.Stat(socketPath(dir, "local.kubevol.io")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket left behind: %v", err)
	}
	h.waitFor(t, "deregister local.kubevol.io")
}

// A refused registration reaches the driver with the reason, and the registrar stops when its
// OnStatus says so, as node-driver-registrar exits.
func TestRefusedRegistration(t *testing.T) {
	dir := t.TempDir()
	h := &recordingHandler{changed: make(chan struct{}, 1), refuse: errors.New("node ID conflict")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = (&Watcher{Dir: dir, Handler: h}).Run(ctx) }()

	var reason string
	r := &Registrar{Dir: dir, Driver: "d.example.com", Endpoint: "/csi.sock", OnStatus: func(ok bool, msg string) error {
		if ok {
			return nil
		}
		reason = msg
		return errors.New("registration refused: " + msg)
	}}
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	select {
	case err := <-done:
		if err == nil || reason != "node ID conflict" {
			t.Fatalf("Serve = %v with reason %q; want it to end with the node's reason", err, reason)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("registrar kept serving after a refused registration")
	}
}

func TestValidate(t *testing.T) {
	w := &Watcher{}
	for _, tc := range []struct {
		typ, name, endpoint string
		versions            []string
		ok                  bool
	}{
		{"CSIPlugin", "a", "/s", []string{"1.0.0"}, true},
		{"CSIPlugin", "a", "/s", []string{"v1.2.0"}, true},
		{"CSIPlugin", "a", "/s", []string{"0.3.0"}, false},
		{"DevicePlugin", "a", "/s", []string{"1.0.0"}, false},
		{"CSIPlugin", "", "/s", []string{"1.0.0"}, false},
	} {
		info := &registerapi.PluginInfo{Type: tc.typ, Name: tc.name, Endpoint: tc.endpoint, SupportedVersions: tc.versions}
		if err := w.validate(info); (err == nil) != tc.ok {
			t.Errorf("validate(%+v) = %v, want ok=%v", tc, err, tc.ok)
		}
	}
}
