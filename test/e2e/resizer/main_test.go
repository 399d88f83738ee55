// Package resizer holds the end-to-end tests of `kubevol resizer` against the real local
// control plane (kube-apiserver's claim validation and admission, kube-controller-manager's
// expander) with the real kubevol driver and provisioner as processes.
package resizer

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
