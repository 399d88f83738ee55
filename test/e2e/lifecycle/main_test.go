// Package lifecycle holds the end-to-end tests of the CSI node side: `kubevol driver`,
// `kubevol provisioner`, `kubevol attacher` and `kubevol node` as processes against the real
// local control plane (scheduler, PV binder, attach/detach controller), from a PVC and a pod
// to a mounted volume and back to nothing.
package lifecycle

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
