package volumemanager

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/pkg/volume"
)

func affinityPV(name, zone string, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		AccessModes: modes,
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{zone}}},
		}}}},
	}}
}

// The PV is read again before the check: a node affinity changed since the pod was
// processed (mutable PV node affinity) is the one that counts, both ways.
func TestNodeAffinityUsesTheCurrentPV(t *testing.T) {
	ctx := context.Background()
	stale := affinityPV("pv", "a", v1.ReadWriteOnce)
	client := fake.NewClientset(affinityPV("pv", "b", v1.ReadWriteOnce))
	m := &Manager{cfg: Config{NodeName: "n", NodeLabels: func(context.Context) (map[string]string, error) {
		return map[string]string{"zone": "a"}, nil
	}}, objects: NewAPIObjectSource(client), asw: newActualState()}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"}}
	dv := DesiredVolume{Name: "test/pv", Spec: volume.SpecFromPersistentVolume(stale, false), OuterNames: []string{"data"}}
	err := m.checkBeforeMount(ctx, pod, dv)
	if err == nil || err.Error() != `MountVolume.NodeAffinity check failed for volume "pv" : no matching NodeSelectorTerms` {
		t.Fatalf("check with the PV now in zone b: %v", err)
	}
	// A block volume's check is MapVolume's; its event is still FailedMount, as upstream.
	blockPV := affinityPV("pv", "a", v1.ReadWriteOnce)
	blockMode := v1.PersistentVolumeBlock
	blockPV.Spec.VolumeMode = &blockMode
	bdv := DesiredVolume{Name: "test/pv", Spec: volume.SpecFromPersistentVolume(blockPV, false), OuterNames: []string{"data"}}
	err = m.checkBeforeMount(ctx, pod, bdv)
	if err == nil || err.Error() != `MapVolume.NodeAffinity check failed for volume "pv" : no matching NodeSelectorTerms` {
		t.Fatalf("block volume, check with the PV now in zone b: %v", err)
	}
	if r := failedMountReason(opsOf(true), err); r != "FailedMount" {
		t.Errorf("event reason of a block volume's node affinity failure: %s, want FailedMount", r)
	}
	if r := failedMountReason(opsOf(true), errors.New("map failed")); r != "FailedMapVolume" {
		t.Errorf("event reason of a block volume's map failure: %s, want FailedMapVolume", r)
	}
	if r := failedMountReason(opsOf(false), err); r != "FailedMount" {
		t.Errorf("event reason of a filesystem volume's failure: %s, want FailedMount", r)
	}
	_, _ = client.CoreV1().PersistentVolumes().Update(ctx, affinityPV("pv", "a", v1.ReadWriteOnce), metav1.UpdateOptions{})
	dv.Spec = volume.SpecFromPersistentVolume(affinityPV("pv", "b", v1.ReadWriteOnce), false)
	if err := m.checkBeforeMount(ctx, pod, dv); err != nil {
		t.Fatalf("check with the PV moved back to zone a: %v", err)
	}
}

// A ReadWriteOncePod volume mounted (or uncertain) for one pod is refused to another, and to
// no one once it is unmounted; other access modes are shared.
func TestReadWriteOncePodRefusal(t *testing.T) {
	ctx := context.Background()
	m := &Manager{cfg: Config{NodeName: "n"}, asw: newActualState()}
	for _, tc := range []struct {
		modes  []v1.PersistentVolumeAccessMode
		refuse bool
	}{
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, true},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, false},
		{[]v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadOnlyMany}, false},
	} {
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: v1.PersistentVolumeSpec{AccessModes: tc.modes}}
		dv := DesiredVolume{Name: "test/pv", PluginName: "test", Spec: volume.SpecFromPersistentVolume(pv, false), OuterNames: []string{"data"}}
		m.asw.markAttached(AttachedVolume{Name: dv.Name, PluginName: "test", Spec: dv.Spec})
		m.asw.setMountState(MountedVolume{Name: dv.Name, PodUID: "u1", State: VolumeMountUncertain})
		first := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", UID: "u1"}}
		second := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p2", UID: "u2"}}
		if err := m.checkBeforeMount(ctx, first, dv); err != nil {
			t.Errorf("%v: the pod that has it mounted is refused: %v", tc.modes, err)
		}
		err := m.checkBeforeMount(ctx, second, dv)
		const want = `MountVolume.SetUp failed for volume "pv" : volume uses the ReadWriteOncePod access mode and is already in use by another pod`
		if tc.refuse != (err != nil) || (err != nil && err.Error() != want) {
			t.Errorf("%v: second pod: %v, want refused %v", tc.modes, err, tc.refuse)
		}
		if tc.refuse {
			// A block volume's refusal is MapVolume.SetUpDevice's, as upstream.
			blockMode := v1.PersistentVolumeBlock
			bpv := pv.DeepCopy()
			bpv.Spec.VolumeMode = &blockMode
			bdv := dv
			bdv.Spec = volume.SpecFromPersistentVolume(bpv, false)
			err := m.checkBeforeMount(ctx, second, bdv)
			if err == nil || err.Error() != strings.Replace(want, "MountVolume.SetUp", "MapVolume.SetUpDevice", 1) {
				t.Errorf("%v: second pod, block: %v", tc.modes, err)
			}
		}
		m.asw.setMountState(MountedVolume{Name: dv.Name, PodUID: "u1", State: VolumeNotMounted})
		if err := m.checkBeforeMount(ctx, second, dv); err != nil {
			t.Errorf("%v: second pod after the first unmounted: %v", tc.modes, err)
		}
	}
}
