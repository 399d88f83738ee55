package sidecar

import (
	"context"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/csiclient"
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
	fi, err := os.Stat(strings.TrimPrefix(target, "unix://"))
	switch {
	case os.IsNotExist(err):
		return "the socket does not exist yet (is the driver's container running, with the socket's volume mounted here?)"
	case err != nil:
		return err.Error()
	case fi.Mode()&os.ModeSocket == 0:
		return "the path exists but is not a socket"
	}
	return "the driver does not answer Probe yet, or is not ready"
}
