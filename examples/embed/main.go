// Command embed is the smallest program that embeds kubevol's volume manager with CSI: it
// sets up the volumes of the pods bound to one Node, in the kubelet's layout under
// --root-dir, and talks to the CSI drivers that register in <root-dir>/plugins_registry,
// as a kubelet does. The Node object is the embedder's (its kubelet or runtime registers
// it). See docs/library.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/csidrivers"
	"github.com/kubevol/kubevol/pkg/podstatus"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volumemanager"
	"github.com/kubevol/kubevol/pkg/volumesinuse"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	nodeName := flag.String("node-name", "", "the Node whose pods' volumes are set up; it must exist")
	rootDir := flag.String("root-dir", "/var/lib/embed", "where pods/<uid>/volumes and plugins_registry live")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err == nil {
		err = run(ctx, kubernetes.NewForConfigOrDie(config), *nodeName, *rootDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run sets up the volumes of nodeName's pods until ctx ends.
func run(ctx context.Context, client kubernetes.Interface, nodeName, rootDir string) error {
	paths := volume.Paths{Root: rootDir}
	drivers := csidrivers.New(client, nodeName)                                             // CSI drivers and the CSINode
	inUse, err := volumesinuse.New(volumesinuse.Config{Client: client, NodeName: nodeName}) // node.status.volumesInUse
	if err != nil {
		return err
	}
	pods := podstatus.New(client) // the pods' VolumesReady condition; deletion once torn down
	m, err := volumemanager.New(volumemanager.Config{
		// client may be the node's own credential (system:node:<name>). Pods and Objects,
		// unset here, replace how pods and the objects their volumes name are read.
		Client: client, NodeName: nodeName, Paths: paths,
		Plugins:             append(plugins.All(), csiplugin.New(csiplugin.Config{Drivers: drivers})),
		Observer:            pods,
		VolumesInUseChanged: inUse.Notify,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The CSIDriver cache for the periodic refresh of each driver's allocatable count
	// (CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds), as the kubelet's CSINode updater.
	factory := informers.NewSharedInformerFactory(client, 0)
	csiDrivers := factory.Storage().V1().CSIDrivers().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := drivers.Watch(ctx, paths.PluginRegistryDir()); err != nil {
			klog.FromContext(ctx).Error(err, "No CSI driver can register")
		}
	})
	wg.Go(func() { drivers.RunAllocatableUpdates(ctx, csiDrivers) })
	wg.Go(func() { inUse.Run(ctx, m) })
	wg.Go(func() { pods.Run(ctx) })
	// A runtime finds where each pod's volumes are in m.ActualState().Volumes() (MountPath of
	// each pod's mount), once m.PodVolumesReady(uid); docs/library.md shows the state views.
	err = m.Run(ctx)
	cancel()
	wg.Wait()
	return err
}
