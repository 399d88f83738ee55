package volumemanager

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	time.Sleep(time.Millisecond) // the clock moves on, so a reset request time would differ; nothing is awaited
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
