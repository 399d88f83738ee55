package volumemanager_test

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/pkg/csidrivers"
	"github.com/kubevol/kubevol/pkg/podstatus"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volumemanager"
	"github.com/kubevol/kubevol/pkg/volumesinuse"
)

// The smallest embedding with CSI: the in-tree plugins plus CSI, whose drivers register in
// <root>/plugins_registry; node.status.volumesInUse for attachable volumes; the pods'
// VolumesReady condition and the end of their deletion. examples/embed is the same as a
// program, with a test.
func Example() {
	ctx := context.Background()
	var client kubernetes.Interface // from your kubeconfig or in-cluster config
	const node = "node-1"           // a Node your kubelet or runtime registers
	paths := volume.Paths{Root: "/var/lib/kubelet"}

	drivers := csidrivers.New(client, node)
	inUse, _ := volumesinuse.New(volumesinuse.Config{Client: client, NodeName: node})
	pods := podstatus.New(client)
	m, err := volumemanager.New(volumemanager.Config{
		Client: client, NodeName: node, Paths: paths,
		Plugins:             append(plugins.All(), csiplugin.New(csiplugin.Config{Drivers: drivers})),
		Observer:            pods,
		VolumesInUseChanged: inUse.Notify,
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = drivers.Watch(ctx, paths.PluginRegistryDir()) }()
	go inUse.Run(ctx, m)
	go pods.Run(ctx)
	_ = m.Run(ctx) // until ctx ends
}
