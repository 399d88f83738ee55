package pluginregistration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Handler receives the CSI plugins that register and go away.
type Handler interface {
	// RegisterPlugin is called once per registration socket; an error is reported to the
	// plugin and the registration is retried when the socket is recreated or on resync.
	RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error
	// DeregisterPlugin is called when the registration socket disappears.
	DeregisterPlugin(ctx context.Context, name string)
}

// Watcher watches a plugin registry directory, as the kubelet's plugin manager does.
type Watcher struct {
	Dir     string
	Handler Handler
	// Resync is how often unregistered sockets are retried; 0 means 30 s.
	Resync time.Duration

	mu         sync.Mutex
	registered map[string]string // socket path → plugin name
}

// Run watches until ctx ends. Sockets already present are registered first.
func (w *Watcher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("dir", w.Dir)
	if err := os.MkdirAll(w.Dir, 0o750); err != nil {
		return err
	}
	if w.Resync <= 0 {
		w.Resync = 30 * time.Second
	}
	w.registered = map[string]string{}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fw.Close()
	if err := fw.Add(w.Dir); err != nil {
		return fmt.Errorf("watch %s: %w", w.Dir, err)
	}
	logger.Info("Watching for plugin registration sockets")
	w.scan(ctx)
	tick := time.NewTicker(w.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-fw.Events:
			switch {
			case ev.Has(fsnotify.Create):
				w.register(ctx, ev.Name)
			case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
				w.deregister(ctx, ev.Name)
			}
		case err := <-fw.Errors:
			logger.Error(err, "Watching the plugin registry failed; rescanning")
			w.scan(ctx)
		case <-tick.C:
			// The safety net: a socket whose registration failed is retried, and one
			// removed without an event is noticed.
			w.scan(ctx)
		}
	}
}

func (w *Watcher) scan(ctx context.Context) {
	present := map[string]bool{}
	_ = filepath.WalkDir(w.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type()&fs.ModeSocket != 0 {
			present[path] = true
			w.register(ctx, path)
		}
		return nil
	})
	w.mu.Lock()
	var gone []string
	for path := range w.registered {
		if !present[path] {
			gone = append(gone, path)
		}
	}
	w.mu.Unlock()
	for _, path := range gone {
		w.deregister(ctx, path)
	}
}

func (w *Watcher) register(ctx context.Context, path string) {
	if st, err := os.Stat(path); err != nil || st.Mode()&fs.ModeSocket == 0 || strings.HasPrefix(filepath.Base(path), ".") {
		return
	}
	w.mu.Lock()
	_, done := w.registered[path]
	w.mu.Unlock()
	if done {
		return
	}
	logger := klog.FromContext(ctx).WithValues("socket", path)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		logger.Error(err, "Cannot reach registration socket")
		return
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The socket file appears at bind(), a moment before listen(): wait for it to answer
	// instead of failing on the first refused connection.
	info, err := client.GetInfo(cctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		logger.Error(err, "GetInfo on registration socket failed; will retry")
		return
	}
	logger = logger.WithValues("plugin", info.Name, "type", info.Type)
	regErr := w.validate(info)
	if regErr == nil {
		regErr = w.Handler.RegisterPlugin(ctx, info.Name, info.Endpoint, info.SupportedVersions)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: regErr == nil}
	if regErr != nil {
		status.Error = regErr.Error()
		logger.Error(regErr, "Plugin registration failed")
	} else {
		w.mu.Lock()
		w.registered[path] = info.Name
		w.mu.Unlock()
		logger.Info("Plugin registered", "endpoint", info.Endpoint, "versions", info.SupportedVersions)
	}
	if _, err := client.NotifyRegistrationStatus(cctx, status); err != nil {
		logger.V(2).Info("NotifyRegistrationStatus failed", "err", err)
	}
}

func (w *Watcher) validate(info *registerapi.PluginInfo) error {
	if info.Type != registerapi.CSIPlugin {
		return fmt.Errorf("plugin type %q is not supported: only %s", info.Type, registerapi.CSIPlugin)
	}
	if info.Name == "" || info.Endpoint == "" {
		return errors.New("plugin info lacks a name or an endpoint")
	}
	// The kubelet accepts any 1.x CSI version; so do we.
	if !slices.ContainsFunc(info.SupportedVersions, func(v string) bool { return strings.HasPrefix(strings.TrimPrefix(v, "v"), "1.") }) {
		return fmt.Errorf("none of the versions %v is supported: want 1.x", info.SupportedVersions)
	}
	return nil
}

func (w *Watcher) deregister(ctx context.Context, path string) {
	w.mu.Lock()
	name, ok := w.registered[path]
	delete(w.registered, path)
	w.mu.Unlock()
	if ok {
		klog.FromContext(ctx).Info("Plugin deregistered", "plugin", name, "socket", path)
		w.Handler.DeregisterPlugin(ctx, name)
	}
}
