package volumemanager

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
)

// A claim refused just after the pod is bound (the node graph lagging) is read again with
// backoff, not reported as final, and the pod mounts once the node may read it.
func TestRefusedClaimIsRetried(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "pvc-uid"},
		Spec:   v1.PersistentVolumeClaimSpec{VolumeName: "pv1"},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "pvc-uid"},
		PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: t.TempDir()}}}}
	if _, err := h.client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	h.client.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) <= 4 {
			return true, nil, apierrors.NewForbidden(v1.Resource("persistentvolumeclaims"), "data", errors.New("no relationship found between node 'node1' and this object"))
		}
		return false, nil, nil
	})
	h.start()
	h.create(pod("p", "uid-p", v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}))
	h.eventually("volumes ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-p"] == 1 }) })
	var msg string
	h.obs.get(func(o *observer) bool { msg = o.failed["uid-p"]; return true })
	if !strings.Contains(msg, "retrying") {
		t.Errorf("the refusal was reported as %q, want a message that says it is retried", msg)
	}
}

// The watches follow the pods: one per distinct object, released when the last pod that
// references it no longer wants its volumes.
func TestWatchesFollowPods(t *testing.T) {
	h := newHarness(t,
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "ns"}, Data: map[string]string{"k": "v"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: "ns"}, Data: map[string][]byte{"k": []byte("v")}})
	h.start()
	secretVol := v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "own"}}}
	h.create(pod("a", "uid-a", cmVolume("c", "shared"), secretVol))
	h.create(pod("b", "uid-b", cmVolume("c", "shared")))
	watches := func() map[ObjectKind]int { return h.m.objects.(objectWatcher).Watches() }
	h.eventually("both ready", func() bool {
		return h.obs.get(func(o *observer) bool { return o.ready["uid-a"] == 1 && o.ready["uid-b"] == 1 })
	})
	if w := watches(); w[KindConfigMap] != 1 || w[KindSecret] != 1 {
		t.Fatalf("watches = %v, want one ConfigMap and one Secret", w)
	}
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the secret's watch released", func() bool { w := watches(); return w[KindSecret] == 0 && w[KindConfigMap] == 1 })
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("every watch released", func() bool { w := watches(); return w[KindSecret] == 0 && w[KindConfigMap] == 0 })
}

// A change of one of a pod's objects while another of its volumes is being set up does not
// make that volume stale unless it refreshes: a volume without RequiresRemount (a CSI volume
// without requiresRepublish) is set up once.
func TestObjectChangeDoesNotRemountOtherVolumes(t *testing.T) {
	sp := &sharedPlugin{gate: make(chan struct{})}
	h := newHarness(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"k": "v1"}})
	h.extra = []volume.Plugin{sp}
	h.start()
	h.create(pod("p", "uid-p", sharedVolume("data"), cmVolume("cfg", "cm")))
	h.eventually("the shared volume's SetUp running", func() bool { return len(sp.events()) > 0 })
	_, err := h.client.CoreV1().ConfigMaps("ns").Update(context.Background(),
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"k": "v2"}}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(h.root, "pods/uid-p/volumes/kubernetes.io~configmap/cfg/k")
	h.eventually("the configMap update", fileIs(cfgFile, "v2"))
	close(sp.gate)
	h.eventually("volumes ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-p"] == 1 }) })
	h.settle("uid-p") // a remount, if any, has run now
	setUps := 0
	for _, e := range sp.events() {
		if e == "setup p" {
			setUps++
		}
	}
	if setUps != 1 {
		t.Errorf("shared volume set up %d times, want 1: %v", setUps, sp.events())
	}
}

// The sources are injection points: with both set, the manager needs no Client of its own
// (a runtime whose pods and objects come from elsewhere).
func TestInjectedSourcesWithoutClient(t *testing.T) {
	h := newHarness(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"k": "v1"}})
	m, err := New(Config{
		NodeName: "node1", Paths: volume.Paths{Root: h.root}, Plugins: plugins.All(), Mounter: h.mounter, Observer: h.obs,
		Objects: NewAPIObjectSource(h.client), Pods: NewAPIPodSource(h.client, "node1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h.create(pod("p", "uid-p", cmVolume("cfg", "cm")))
	h.eventually("volumes ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-p"] == 1 }) })
	h.eventually("configmap file", fileIs(filepath.Join(h.root, "pods/uid-p/volumes/kubernetes.io~configmap/cfg/k"), "v1"))
	if _, err := New(Config{NodeName: "node1", Paths: volume.Paths{Root: h.root}, Objects: NewAPIObjectSource(h.client)}); err == nil {
		t.Error("New without Client and without Pods succeeded")
	}
}
