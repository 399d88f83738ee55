// Package snapshotter holds the end-to-end tests of `kubevol snapshotter` against the real
// local control plane with the generated snapshot CRDs (and their CEL validation), the real
// kubevol driver, provisioner and node agent as processes. The tests run one after the
// other: a cluster has one snapshot-controller, and each test runs its own.
package snapshotter

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
