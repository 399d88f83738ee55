package pluginregistration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// supportedVersions are the CSI versions a registration announces, as node-driver-registrar.
var supportedVersions = []string{"1.0.0"}

// socketPath is where node-driver-registrar puts a driver's registration socket.
func socketPath(dir, driver string) string { return filepath.Join(dir, driver+"-reg.sock") }

// Registrar serves one driver's registration socket.
type Registrar struct {
	// Dir is the registry directory the node agent watches (<root-dir>/plugins_registry).
	Dir string
	// Driver is the CSI driver name.
	Driver string
	// Endpoint is the driver's CSI socket path, as the node agent sees it.
	Endpoint string
	// OnStatus, if set, receives the node agent's verdict; an error from it ends Serve.
	// Upstream's registrar exits when registration fails.
	OnStatus func(registered bool, msg string) error

	registerapi.UnimplementedRegistrationServer
	failed chan error
	// logger is Serve's: the verdict arrives on a gRPC call's context, which has none.
	logger klog.Logger
}

// Serve listens on the registration socket until ctx ends, and removes the socket then, so
// the node agent sees the driver go away.
func (r *Registrar) Serve(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("driver", r.Driver)
	r.logger = logger
	if err := os.MkdirAll(r.Dir, 0o750); err != nil {
		return err
	}
	path := socketPath(r.Dir, r.Driver)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", path, err)
	}
	// As node-driver-registrar: the socket is for the node agent (root) only.
	old := syscall.Umask(0o077)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	// Another registrar of the same driver may replace the socket while this one serves;
	// only our own socket is removed at the end.
	mine, _ := os.Stat(path)
	r.failed = make(chan error, 1)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, r)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	logger.Info("Serving plugin registration", "socket", path, "endpoint", r.Endpoint)
	var result error
	select {
	case <-ctx.Done():
	case result = <-r.failed:
	case result = <-served:
	}
	srv.Stop()
	if now, err := os.Stat(path); err == nil && mine != nil && os.SameFile(mine, now) {
		_ = os.Remove(path)
	}
	return result
}

// GetInfo implements registerapi.RegistrationServer.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.Driver,
		Endpoint:          r.Endpoint,
		SupportedVersions: supportedVersions,
	}, nil
}

// NotifyRegistrationStatus implements registerapi.RegistrationServer.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	logger := r.logger
	if st.PluginRegistered {
		logger.Info("Registered with the node agent")
	} else {
		logger.Error(nil, "Registration refused by the node agent", "reason", st.Error)
	}
	if r.OnStatus != nil {
		if err := r.OnStatus(st.PluginRegistered, st.Error); err != nil {
			select {
			case r.failed <- err:
			default:
			}
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
