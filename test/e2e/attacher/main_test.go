// Package attacher holds the end-to-end tests of `kubevol attacher` against the real local
// control plane (including kube-controller-manager's attach/detach controller) and the real
// kubevol CSI driver over gRPC.
package attacher

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
