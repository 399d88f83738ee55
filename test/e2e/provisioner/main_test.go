// Package provisioner_test runs `kubevol provisioner` beside `kubevol driver` against the real
// local control plane and checks the claim and volume flows, the PV shape, the events, the
// bad inputs and crash safety.
package provisioner_test

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
