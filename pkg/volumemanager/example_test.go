package volumemanager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

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
	for !m.PodVolumesReady("uid-web") {
		time.Sleep(10 * time.Millisecond)
	}

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
