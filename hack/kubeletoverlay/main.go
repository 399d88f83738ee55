// Command kubeletoverlay prints the build flags (-modfile, -overlay) under which the control
// plane's module (cmd/kubevol-cluster) links kubevol's volume manager into the kubelet, after
// generating the overlay (internal/cluster/kubeletoverlay). make vet runs go vet with them:
//
//	cd cmd/kubevol-cluster && go vet $(go run ../../hack/kubeletoverlay) ./...
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

func main() {
	root, err := localcluster.FindModuleRoot()
	if err == nil {
		var b interface{ Flags() []string }
		b, err = localcluster.KubeletOverlay(root)
		if err == nil {
			fmt.Println(strings.Join(b.Flags(), " "))
			return
		}
	}
	fmt.Fprintln(os.Stderr, "kubeletoverlay:", err)
	os.Exit(1)
}
