// Package cluster holds the end-to-end tests of the local control plane itself and of the
// deploy/ manifests.
package cluster

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
