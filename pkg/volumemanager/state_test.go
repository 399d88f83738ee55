package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/pkg/volume"
)

func TestDesiredState(t *testing.T) {
	d := newDesiredState()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}}
	d.setPod(pod, []DesiredVolume{{Name: "a", PluginName: "x"}, {Name: "b", PluginName: "x", Attachable: true}}, nil)
	first := d.PodVolumes("p1")[0].RequestTime
	if !d.PodWantsVolume("p1", "a") || !d.VolumeWanted("b") || d.PodWantsVolume("p2", "a") {
		t.Fatal("wants")
	}
	if got := d.AttachableVolumes(); len(got) != 1 || got[0] != "b" {
		t.Errorf("attachable %v", got)
	}
	time.Sleep(time.Millisecond)
	d.setPod(pod, []DesiredVolume{{Name: "a", PluginName: "x"}}, []volumeFailure{{outer: "c", message: "boom"}})
	if vols := d.PodVolumes("p1"); len(vols) != 1 || !vols[0].RequestTime.Equal(first) {
		t.Errorf("refresh lost the request time or kept b: %+v", vols)
	}
	if d.VolumeWanted("b") {
		t.Error("b still wanted")
	}
	if errs := d.PodErrors("p1"); len(errs) != 1 {
		t.Errorf("errors %v", errs)
	}
	d.setPod(&v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p2"}}, []DesiredVolume{{Name: "a", PluginName: "x"}}, nil)
	if users := d.VolumeUsers("a"); len(users) != 2 {
		t.Errorf("users %v", users)
	}
	if c := d.Counts()["x"]; c != 2 {
		t.Errorf("count %d", c)
	}
	d.deletePod("p1")
	if d.HasPod("p1") || !d.VolumeWanted("a") {
		t.Error("delete")
	}
}

// A volume the pod wanted stays wanted, as it was, when reading it again fails; a volume
// that never resolved is an error of the pod.
func TestDesiredStateHoldsResolvedVolumes(t *testing.T) {
	d := newDesiredState()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}}
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "old"}}
	d.setPod(pod, []DesiredVolume{{Name: "pv", PluginName: "x", OuterNames: []string{"data"}, Claim: claim}}, nil)
	first := d.PodVolumes("p1")[0].RequestTime

	d.setPod(pod, nil, []volumeFailure{{outer: "data", message: "get PVC: refused"}, {outer: "new", message: "not bound"}})
	vols := d.PodVolumes("p1")
	if len(vols) != 1 || vols[0].Name != "pv" || vols[0].Claim != claim || !vols[0].RequestTime.Equal(first) {
		t.Fatalf("held volume not kept as it was: %+v", vols)
	}
	if !d.PodWantsVolume("p1", "pv") {
		t.Error("held volume not wanted")
	}
	if errs, held := d.PodErrors("p1"), d.heldErrors("p1"); len(errs) != 1 || errs[0] != "not bound" || len(held) != 1 || held[0] != "get PVC: refused" {
		t.Errorf("errors %q, held %q", errs, held)
	}

	d.setPod(pod, nil, nil) // resolved, and the pod no longer wants it
	if d.VolumeWanted("pv") || len(d.heldErrors("p1")) != 0 {
		t.Error("a volume the pod no longer wants is still held")
	}
}

func TestActualState(t *testing.T) {
	a := newActualState()
	a.markAttached(AttachedVolume{Name: "v", PluginName: "x"})
	a.setMountState(MountedVolume{Name: "v", PodUID: "p1", State: VolumeMountUncertain, Reconstructed: true})
	a.markRemountRequired("p1", []v1.UniqueVolumeName{"v"})
	if mv, _ := a.PodVolume("p1", "v"); !mv.RemountRequired || !mv.Reconstructed {
		t.Errorf("%+v", mv)
	}
	a.completeMount(MountedVolume{Name: "v", PodUID: "p1"}, true, "")
	if mv, _ := a.PodVolume("p1", "v"); mv.State != VolumeMounted || !mv.RemountRequired || mv.Reconstructed {
		t.Errorf("stale completion: %+v", mv)
	}
	a.remove("v")
	if !a.IsAttached("v") {
		t.Error("removed a volume with a mounted pod")
	}
	a.setMountState(MountedVolume{Name: "v", PodUID: "p1", State: VolumeNotMounted})
	if len(a.PodVolumes("p1")) != 0 || len(a.UnusedVolumes()) != 1 {
		t.Error("unmount")
	}
	a.remove("v")
	if a.IsAttached("v") {
		t.Error("not removed")
	}
}

func TestExecutorSerializesAndBacksOff(t *testing.T) {
	e := NewExecutor(time.Second, 4)
	now := time.Now()
	e.now = func() time.Time { return now }
	release := make(chan struct{})
	done := make(chan error, 10)
	run := func(key OpKey, name string, err error) error {
		return e.Run(context.Background(), Operation{Key: key, Name: name,
			Run:  func(context.Context) error { <-release; return err },
			Done: func(err error) { done <- err }})
	}
	if err := run(OpKey{"v", "p1"}, opMount, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if err := run(OpKey{"v", "p1"}, opMount, nil); !errors.Is(err, ErrPending) {
		t.Errorf("same key: %v", err)
	}
	if err := run(OpKey{"v", ""}, opMount, nil); !errors.Is(err, ErrPending) {
		t.Errorf("wildcard: %v", err)
	}
	close(release)
	<-done
	if err := run(OpKey{"v", "p2"}, opMount, nil); err != nil {
		t.Errorf("other pod: %v", err)
	}
	<-done
	var be *BackoffError
	if err := run(OpKey{"v", "p1"}, opMount, nil); !errors.As(err, &be) || be.Until.Sub(now) != InitialBackoff {
		t.Fatalf("backoff: %v", err)
	}
	// Doubling up to the cap.
	delays := []time.Duration{}
	for i := 0; i < 12; i++ {
		now = now.Add(MaxBackoff)
		if err := run(OpKey{"v", "p1"}, opMount, errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		<-done
		e.mu.Lock()
		delays = append(delays, e.backoff[OpKey{"v", "p1"}].delay)
		e.mu.Unlock()
	}
	if delays[0] != 2*InitialBackoff || delays[len(delays)-1] != MaxBackoff {
		t.Errorf("delays %v", delays)
	}
	// Another operation on the key is not held back.
	if err := run(OpKey{"v", "p1"}, opUnmount, nil); err != nil {
		t.Errorf("unmount held back by a failing mount: %v", err)
	}
	<-done
	// A refusal (the node graph lagging behind a new pod) is retried within seconds.
	refused := fmt.Errorf("request token: %w", apierrors.NewForbidden(v1.Resource("serviceaccounts/token"), "default", errors.New("no relationship found")))
	for i := 0; i < 12; i++ {
		now = now.Add(MaxBackoff)
		if err := run(OpKey{"v", "p3"}, opMount, refused); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	if err := run(OpKey{"v", "p3"}, opMount, nil); !errors.As(err, &be) || be.Until.Sub(now) != claimBackoff.max {
		t.Errorf("backoff after refusals: %v, want %v", err, claimBackoff.max)
	}
}

func TestExecutorTimeoutIsUncertain(t *testing.T) {
	e := NewExecutor(20*time.Millisecond, 1)
	done := make(chan error, 1)
	var ran atomic.Bool
	err := e.Run(context.Background(), Operation{Key: OpKey{Volume: "v"}, Name: opMount,
		Run:  func(ctx context.Context) error { ran.Store(true); <-ctx.Done(); return ctx.Err() },
		Done: func(err error) { done <- err }})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !volume.IsUncertain(err) || !ran.Load() {
		t.Errorf("timeout gave %v", err)
	}
}
