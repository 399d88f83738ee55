package volumemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
)

// benchManager runs a manager over a fake API server holding pod and objs.
func benchManager(b *testing.B, p *v1.Pod, objs ...runtime.Object) *Manager {
	m, _, _ := benchManagerClient(b, p, objs...)
	return m
}

// benchManagerClient is benchManager that also returns the fake API server and the root
// directory.
func benchManagerClient(b *testing.B, p *v1.Pod, objs ...runtime.Object) (*Manager, *fake.Clientset, string) {
	client := fake.NewClientset(append([]runtime.Object{p}, objs...)...)
	root := b.TempDir()
	m, err := New(Config{Client: client, NodeName: "node1", Paths: volume.Paths{Root: root},
		Plugins: plugins.All(), Mounter: mount.NewFakeMounter(nil)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return m.PodVolumesReady(p.UID), nil }); err != nil {
		b.Fatal("pod not ready")
	}
	return m, client, root
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

// BenchmarkObjectUpdate is what `kubevol node` takes to apply a ConfigMap or Secret change to
// a mounted pod: from the update's return to the new content in the volume's file, through
// the object's watch, the pod's resync and the volume's atomic rewrite (the kubelet's
// configMap and secret plugins' SetUp on every sync). The API server is a fake one: its
// watch delivery is immediate, where a real one adds its own (bench node measures that).
// Besides ns/op (the mean), it reports the slowest update of the run.
func BenchmarkObjectUpdate(b *testing.B) {
	for _, kind := range []string{"configmap", "secret"} {
		b.Run(kind, func(b *testing.B) {
			vol := cmVolume("obj", "obj")
			obj := runtime.Object(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "obj", Namespace: "ns"}, Data: map[string]string{"k": "v"}})
			if kind == "secret" {
				vol = v1.Volume{Name: "obj", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "obj"}}}
				obj = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "obj", Namespace: "ns"}, Data: map[string][]byte{"k": []byte("v")}}
			}
			p := pod("bench", "uid-bench", vol)
			p.ObjectMeta.ResourceVersion = "1"
			_, client, root := benchManagerClient(b, p, obj)
			file := filepath.Join(root, "pods", "uid-bench", "volumes", "kubernetes.io~"+kind, "obj", "k")
			ctx := context.Background()
			var slowest time.Duration
			b.ResetTimer()
			for i := range b.N {
				want := "v" + strconv.Itoa(i)
				meta := metav1.ObjectMeta{Name: "obj", Namespace: "ns", ResourceVersion: strconv.Itoa(i + 2)}
				start := time.Now()
				var err error
				if kind == "secret" {
					_, err = client.CoreV1().Secrets("ns").Update(ctx, &v1.Secret{ObjectMeta: meta, Data: map[string][]byte{"k": []byte(want)}}, metav1.UpdateOptions{})
				} else {
					_, err = client.CoreV1().ConfigMaps("ns").Update(ctx, &v1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": want}}, metav1.UpdateOptions{})
				}
				if err != nil {
					b.Fatal(err)
				}
				for {
					if data, err := os.ReadFile(file); err == nil && string(data) == want {
						break
					}
					if time.Since(start) > 10*time.Second {
						b.Fatalf("%s update %d not in %s after 10 s", kind, i, file)
					}
					// The polling interval is the figure's resolution: no condition
					// helper, whose own overhead would be measured too.
					time.Sleep(100 * time.Microsecond)
				}
				slowest = max(slowest, time.Since(start))
			}
			b.ReportMetric(slowest.Seconds()*1000, "max-ms")
		})
	}
}
