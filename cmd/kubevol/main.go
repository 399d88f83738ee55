// Command kubevol is the kubevol product binary: the CSI provisioner, the attacher, the node
// volume manager, the local CSI driver, a local cluster for development (`up`) and benchmarks.
package main

import (
	"os"

	"github.com/kubevol/kubevol/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr))
}
