// Package failover holds the end-to-end tests of the controller roles run as operators run
// them: two leader-elected replicas each, whose leader dies. The roles are the provisioner,
// the attacher, the resizer, the csi-snapshotter and the snapshot-controller (the group
// snapshot controllers run inside the last two, under their Leases, as upstream's). The
// package also holds the benchmark of throughput under failover.
package failover

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
