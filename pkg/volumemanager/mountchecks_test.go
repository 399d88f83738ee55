package volumemanager

import (
	"context"
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
	if err == nil || err.Error() != `MountVolume.NodeAffinity check failed for volume "data": no matching NodeSelectorTerms` {
		t.Fatalf("check with the PV now in zone b: %v", err)
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
		if tc.refuse != (err != nil) || (err != nil && !strings.Contains(err.Error(), "volume uses the ReadWriteOncePod access mode and is already in use by another pod")) {
			t.Errorf("%v: second pod: %v, want refused %v", tc.modes, err, tc.refuse)
		}
		m.asw.setMountState(MountedVolume{Name: dv.Name, PodUID: "u1", State: VolumeNotMounted})
		if err := m.checkBeforeMount(ctx, second, dv); err != nil {
			t.Errorf("%v: second pod after the first unmounted: %v", tc.modes, err)
		}
	}
}
