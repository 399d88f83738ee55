package volume_test

import (
	"fmt"

	"github.com/kubevol/kubevol/pkg/volume"
)

// Paths gives the kubelet's layout under any root directory.
func ExamplePaths() {
	p := volume.Paths{Root: "/var/lib/kubelet"}
	fmt.Println(p.PodVolumeDir("0b5c8a2e", "kubernetes.io/configmap", "config"))
	fmt.Println(p.PodSubpathDir("0b5c8a2e", "config", "app", 0))
	fmt.Println(p.PluginRegistryDir())
	// Output:
	// /var/lib/kubelet/pods/0b5c8a2e/volumes/kubernetes.io~configmap/config
	// /var/lib/kubelet/pods/0b5c8a2e/volume-subpaths/config/app/0
	// /var/lib/kubelet/plugins_registry
}
