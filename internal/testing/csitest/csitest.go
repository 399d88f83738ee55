// Package csitest serves memdriver's in-memory CSI controller for the length of a test.
package csitest

import (
	"path/filepath"
	"testing"

	"github.com/kubevol/kubevol/internal/testing/memdriver"
)

type (
	// Driver is memdriver.Driver, under the name the tests use.
	Driver = memdriver.Driver
	// Server is memdriver.Server.
	Server = memdriver.Server
)

// Start serves the driver on a socket in a temporary directory until the test ends.
func Start(t testing.TB, d *Driver) *Driver {
	return StartAs(t, d, d)
}

// StartAs is Start with s, which embeds d, answering the calls in d's place; d.Address is
// where s is served.
func StartAs(t testing.TB, d *Driver, s Server) *Driver {
	t.Helper()
	stop, err := d.ServeAs(filepath.Join(t.TempDir(), "csi.sock"), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return d
}
