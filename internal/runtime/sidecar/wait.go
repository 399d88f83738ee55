package sidecar

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// stillWaitingEvery is how often a sidecar that waits for its driver says so: upstream's
// sidecars log "Still connecting" every 10 s, so that a missing socket is neither a crash
// loop nor a silent hang.
var stillWaitingEvery = 10 * time.Second

// waitForDriver probes the driver until it answers ready, and meanwhile logs one line every
// stillWaitingEvery that names the address, how long it has waited and why.
func waitForDriver(ctx context.Context, conn *csiclient.Conn, address string) error {
	logger := klog.FromContext(ctx)
	done := make(chan struct{})
	defer close(done)
	start := time.Now()
	go func() {
		tick := time.NewTicker(stillWaitingEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				logger.Info("Still waiting for the CSI driver", "address", address, "waited", time.Since(start).Round(time.Second), "reason", socketState(address))
			}
		}
	}()
	return conn.ProbeForever(ctx)
}

// socketState says why a driver at address may not answer.
func socketState(address string) string {
	target, err := csiclient.Target(address)
	if err != nil {
		return err.Error()
	}
	path := strings.TrimPrefix(target, "unix://")
	fi, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
		return "the socket does not exist yet (is the driver's container running, with the socket's volume mounted here?)"
	case err != nil:
		return err.Error()
	case fi.Mode()&os.ModeSocket == 0:
		return "the path exists but is not a socket"
	}
	// connect(2) needs write permission on the socket. Upstream's images run as root, so a
	// driver's root-owned 0755 socket works for them and not for a non-root sidecar.
	if err := unix.Access(path, unix.W_OK); err != nil {
		owner := ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = fmt.Sprintf(", owner %d:%d", st.Uid, st.Gid)
		}
		return fmt.Sprintf("this process (uid %d, gid %d) may not connect to the socket (mode %v%s): run it as the socket's owner or group (securityContext runAsUser/runAsGroup)",
			os.Getuid(), os.Getgid(), fi.Mode().Perm(), owner)
	}
	return "the driver does not answer Probe yet, or is not ready"
}
