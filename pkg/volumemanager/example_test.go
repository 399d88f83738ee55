package volumemanager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/mount-utils"

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

// An embedder reads what the manager wants and what it has mounted where through the
// read-only views. Here a pod with an emptyDir is served by a manager on a fake API server.
func ExampleManager_ActualState() {
	root, _ := os.MkdirTemp("", "volumemanager-example")
	defer os.RemoveAll(root)
	client := fake.NewClientset(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{NodeName: "node1",
			Volumes:    []v1.Volume{{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			Containers: []v1.Container{{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}},
		},
	})
	m, err := volumemanager.New(volumemanager.Config{
		Client: client, NodeName: "node1", Paths: volume.Paths{Root: root},
		Plugins: plugins.All(), Mounter: mount.NewFakeMounter(nil),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return m.PodVolumesReady("uid-web"), nil })

	for _, p := range m.DesiredState().Pods() {
		for _, v := range p.Volumes {
			fmt.Printf("%s/%s wants %s as %v\n", p.Pod.Namespace, p.Pod.Name, v.Name, v.OuterNames)
		}
	}
	for _, v := range m.ActualState().Volumes() {
		for _, mv := range v.Mounts {
			rel, _ := filepath.Rel(root, mv.MountPath)
			fmt.Printf("%s is %s for pod %s at %s (reconstructed: %v)\n", v.Name, mv.State, mv.PodUID, rel, mv.Reconstructed)
		}
	}
	// Output:
	// default/web wants kubernetes.io/empty-dir/uid-web-cache as [cache]
	// kubernetes.io/empty-dir/uid-web-cache is VolumeMounted for pod uid-web at pods/uid-web/volumes/kubernetes.io~empty-dir/cache (reconstructed: false)
}
