package volumemanager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/pkg/volume"
)

// claimFaults makes the claim GETs of a harness fail while set, and counts them.
type claimFaults struct {
	err   atomic.Pointer[error]
	reads atomic.Int32
}

func (f *claimFaults) set(err error) { f.err.Store(&err) }

func (f *claimFaults) install(h *harness) {
	h.client.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.reads.Add(1)
		if p := f.err.Load(); p != nil && *p != nil {
			return true, nil, *p
		}
		return false, nil, nil
	})
}

// waitReads waits until the claim was read n more times.
func (f *claimFaults) waitReads(h *harness, n int32) {
	h.t.Helper()
	target := f.reads.Load() + n
	h.eventually("claim read again", func() bool { return f.reads.Load() >= target })
}

// sharedClaim creates a bound claim "data" of the shared plugin's volume /vol1.
func sharedClaim(h *harness) *v1.PersistentVolumeClaim {
	h.t.Helper()
	ctx := context.Background()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "pvc-uid",
		Finalizers: []string{pvcProtectionFinalizer}},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv1"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "pvc-uid"},
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/vol1"}}}}
	if _, err := h.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	pvc, err := h.client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pvc
}

func claimPod(name string, uid types.UID) *v1.Pod {
	return pod(name, uid, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
}

func (h *harness) ready(uid types.UID) {
	h.t.Helper()
	h.eventually(string(uid)+" ready", func() bool { return h.m.PodVolumesReady(uid) })
}

// noTeardown fails the test if the shared plugin tore a volume down.
func noTeardown(t *testing.T, sp *sharedPlugin, when string) {
	t.Helper()
	for _, e := range sp.events() {
		if strings.HasPrefix(e, "teardown") || e == "unstage" {
			t.Fatalf("%s: %s; plugin calls %q", when, e, sp.events())
		}
	}
}

// A running pod keeps its claim's volume whatever the claim's reads say: failed, refused,
// or a claim being deleted that pvc-protection still holds. The kubelet refuses such a claim
// only when it first sets a pod up, and only once nothing protects it.
func TestHeldVolumeOutlastsFailedReads(t *testing.T) {
	sp := &sharedPlugin{}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	h.claimSync = 20 * time.Millisecond
	rec := record.NewFakeRecorder(100)
	h.recorder = rec
	var faults claimFaults
	faults.install(h)
	pvc := sharedClaim(h)
	h.start()
	h.create(claimPod("app", "uid-app"))
	h.ready("uid-app")

	for _, err := range []error{
		apierrors.NewInternalError(errors.New("etcdserver: request timed out")),
		apierrors.NewForbidden(v1.Resource("persistentvolumeclaims"), "data", errors.New("no relationship found between node 'node1' and this object")),
	} {
		faults.set(err)
		faults.waitReads(h, 5)
		noTeardown(t, sp, "after "+err.Error())
		if !h.m.PodVolumesReady("uid-app") {
			t.Errorf("pod not ready after %v", err)
		}
	}
	faults.set(nil)
	if !slices.ContainsFunc(drain(rec), func(e string) bool { return strings.Contains(e, volumeRefreshFailed) }) {
		t.Errorf("no %s event for the failed reads", volumeRefreshFailed)
	}

	// kubectl delete pvc: protected while the pod runs.
	now := metav1.Now()
	pvc.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().PersistentVolumeClaims("ns").Update(context.Background(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	faults.waitReads(h, 5)
	noTeardown(t, sp, "after the claim's deletion began")
	// A new pod may still use a protected claim, as with the kubelet.
	h.create(claimPod("second", "uid-second"))
	h.ready("uid-second")

	// Once nothing protects the claim, a new pod is refused; the running ones keep it.
	pvc.Finalizers = nil
	if _, err := h.client.CoreV1().PersistentVolumeClaims("ns").Update(context.Background(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.create(claimPod("third", "uid-third"))
	h.eventually("third refused", func() bool {
		return h.obs.get(func(o *observer) bool { return strings.Contains(o.failed["uid-third"], "is being deleted") })
	})
	noTeardown(t, sp, "after the claim lost its protection")

	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("app torn down", func() bool { return slices.Contains(sp.events(), "teardown uid-app") })
}

// A restarted manager that reads its pods but not their claims keeps what is mounted for
// them: what a pod wants is not known until all its volumes resolve.
func TestRestartWithUnreadableClaimsKeepsMounts(t *testing.T) {
	sp := &sharedPlugin{}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	var faults claimFaults
	faults.install(h)
	sharedClaim(h)
	h.start()
	h.create(claimPod("app", "uid-app"))
	h.ready("uid-app")
	h.stop()

	faults.set(errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"))
	h.obs = newObserver()
	h.start()
	faults.waitReads(h, 5)
	noTeardown(t, sp, "restarted with unreadable claims")
	if _, ok := h.m.ActualState().PodVolume("uid-app", "test/shared//vol1"); !ok {
		t.Errorf("the pod's volume is not in the actual state: %+v", h.m.ActualState().PodVolumes("uid-app"))
	}

	faults.set(nil)
	h.ready("uid-app")
	noTeardown(t, sp, "once the claims resolved")
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A pod setting a claim up reads it as it is now, not as the cache holds it from another
// pod's resolution: once the claim's deletion began and nothing protects it, the new pod is
// refused, as by the kubelet, while the running pod keeps its volume.
func TestNewPodReadsClaimAsItIsNow(t *testing.T) {
	sp := &sharedPlugin{}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	pvc := sharedClaim(h)
	h.start() // the claim sync, and so the cache's emptying, is a minute away
	h.create(claimPod("app", "uid-app"))
	h.ready("uid-app")

	now := metav1.Now()
	pvc.DeletionTimestamp, pvc.Finalizers = &now, nil
	if _, err := h.client.CoreV1().PersistentVolumeClaims("ns").Update(context.Background(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.create(claimPod("late", "uid-late"))
	h.eventually("late refused", func() bool {
		return h.obs.get(func(o *observer) bool { return strings.Contains(o.failed["uid-late"], "is being deleted") })
	})
	if h.m.PodVolumesReady("uid-late") {
		t.Error("a new pod mounted a claim being deleted")
	}
	noTeardown(t, sp, "after a new pod was refused the claim")
}
