package driver_test

import (
	"os"
	"testing"

	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

func TestMain(m *testing.M) {
	// The restart tests run this binary as the driver process they kill -9.
	drivertest.RunChildIfRequested()
	os.Exit(m.Run())
}
