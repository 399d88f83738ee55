package volumemanager

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
)

// benchManager runs a manager over a fake API server holding pod.
func benchManager(b *testing.B, p *v1.Pod) *Manager {
	client := fake.NewClientset(p)
	m, err := New(Config{Client: client, NodeName: "node1", Paths: volume.Paths{Root: b.TempDir()},
		Plugins: plugins.All(), Mounter: mount.NewFakeMounter(nil)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for !m.PodVolumesReady(p.UID) {
		if time.Now().After(deadline) {
			b.Fatal("pod not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return m
}

func benchPod() *v1.Pod {
	var vols []v1.Volume
	for i := range 5 {
		vols = append(vols, emptyDirVolume(fmt.Sprintf("v%d", i)))
	}
	p := pod("bench", "uid-bench", vols...)
	p.ObjectMeta.ResourceVersion = "1"
	return p
}

// BenchmarkSyncReadyPod is one pass of a pod worker over a pod whose volumes are all
// mounted, the path every event and resync of a settled node takes: populate, reconcile,
// status. It measures the bookkeeping, not the plugins.
func BenchmarkSyncReadyPod(b *testing.B) {
	p := benchPod()
	m := benchManager(b, p)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m.populate(ctx, p.UID)
		m.reconcilePod(ctx, p.UID)
	}
}

// BenchmarkPodEvent is what an informer event of a pod costs the bookkeeping: the record
// and the index of the objects its volumes refer to.
func BenchmarkPodEvent(b *testing.B) {
	p := benchPod()
	p.Spec.Volumes = append(p.Spec.Volumes, cmVolume("a", "cm"), cmVolume("b", "cm2"))
	m := benchManager(b, benchPod())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m.records.note(p, false)
	}
}
