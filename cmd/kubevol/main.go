// Command kubevol is the kubevol product binary: the CSI provisioner, the attacher, the node
// volume manager, the local CSI driver, a local cluster for development (`up`) and benchmarks.
//
// Started under another name (a copy or link: csi-provisioner, csi-attacher, csi-resizer,
// csi-snapshotter, snapshot-controller, kubevol-driver, kubevol-node, kubevol-csr-approver)
// it is that one role and takes its flags only, as upstream's images start their sidecars.
package main

import (
	"os"

	"github.com/kubevol/kubevol/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr))
}
