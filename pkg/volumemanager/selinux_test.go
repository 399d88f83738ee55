package volumemanager

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// seLinuxPlugin is a plugin that says whether it supports SELinux context mounts.
type seLinuxPlugin struct {
	sharedPlugin
	supports bool
}

func (p *seLinuxPlugin) SupportsSELinuxContextMount(*volume.Spec) (bool, error) {
	return p.supports, nil
}

func seLinuxPod(uid types.UID, policy *v1.PodSELinuxChangePolicy, podLevel string, containerLevels ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), UID: uid}}
	if podLevel != "" || policy != nil {
		p.Spec.SecurityContext = &v1.PodSecurityContext{SELinuxChangePolicy: policy}
		if podLevel != "" {
			p.Spec.SecurityContext.SELinuxOptions = &v1.SELinuxOptions{Level: podLevel}
		}
	}
	if len(containerLevels) == 0 {
		containerLevels = []string{""}
	}
	for i, l := range containerLevels {
		c := v1.Container{Name: string(rune('a' + i)), VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/d"}}}
		if l != "" {
			c.SecurityContext = &v1.SecurityContext{SELinuxOptions: &v1.SELinuxOptions{Level: l, Type: "container_t"}}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

func rwoSpec(modes ...v1.PersistentVolumeAccessMode) *volume.Spec {
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: v1.PersistentVolumeSpec{AccessModes: modes}}, false)
}

// The label is the containers' file label, used for the mount when the host runs SELinux,
// the plugin supports it, the volume is a PV (any access mode: SELinuxMount) and the pod
// does not ask for a recursive relabel.
func TestChooseSELinux(t *testing.T) {
	recursive, mountOption := v1.SELinuxChangePolicyRecursive, v1.SELinuxChangePolicyMountOption
	supporting, other := &seLinuxPlugin{supports: true}, &seLinuxPlugin{}
	inline := volume.SpecFromVolume(&v1.Volume{Name: "data"})
	for _, tc := range []struct {
		name            string
		enabled         bool
		plugin          volume.Plugin
		spec            *volume.Spec
		pod             *v1.Pod
		mount, original string
		err             string
	}{
		{"pod level, RWOP", true, supporting, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", nil, "s0:c1,c2"), "system_u:object_r:container_file_t:s0:c1,c2", "system_u:object_r:container_file_t:s0:c1,c2", ""},
		{"RWX too (SELinuxMount)", true, supporting, rwoSpec(v1.ReadWriteMany), seLinuxPod("u", &mountOption, "s0:c1,c2"), "system_u:object_r:container_file_t:s0:c1,c2", "system_u:object_r:container_file_t:s0:c1,c2", ""},
		{"container level wins", true, supporting, rwoSpec(v1.ReadWriteOnce), seLinuxPod("u", nil, "s0:c1,c2", "s0:c3,c4"), "system_u:object_r:container_file_t:s0:c3,c4", "system_u:object_r:container_file_t:s0:c3,c4", ""},
		{"Recursive policy", true, supporting, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", &recursive, "s0:c1,c2"), "", "", ""},
		{"plugin without support", true, other, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", nil, "s0:c1,c2"), "", "", ""},
		{"inline volume", true, supporting, inline, seLinuxPod("u", nil, "s0:c1,c2"), "", "system_u:object_r:container_file_t:s0:c1,c2", ""},
		{"no level", true, supporting, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", nil, ""), "", "", ""},
		{"host without SELinux", false, supporting, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", nil, "s0:c1,c2"), "", "", ""},
		{"a container without options does not count", true, supporting, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", nil, "", "s0:c1,c2", ""), "system_u:object_r:container_file_t:s0:c1,c2", "system_u:object_r:container_file_t:s0:c1,c2", ""},
		{"containers disagree", true, supporting, rwoSpec(v1.ReadWriteOncePod), seLinuxPod("u", nil, "", "s0:c1,c2", "s0:c3,c4"), "", "",
			"multiple SELinux labels found: system_u:object_r:container_file_t:s0:c1,c2,system_u:object_r:container_file_t:s0:c3,c4"},
		{"containers disagree on an inline volume: warning only", true, supporting, inline, seLinuxPod("u", nil, "", "s0:c1,c2", "s0:c3,c4"), "", "", ""},
	} {
		reg := prometheus.NewRegistry()
		m := &Manager{seLinuxEnabled: tc.enabled, seLinuxMetrics: newSELinuxMetrics(reg)}
		c, err := m.chooseSELinux(tc.plugin, tc.spec, containerSELinuxOptions(tc.pod)["data"], tc.pod)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			if v := testutil.ToFloat64(m.seLinuxMetrics.podMismatchErrors.WithLabelValues("RWOP")); v != 1 {
				t.Errorf("%s: pod_context_mismatch_errors_total = %v", tc.name, v)
			}
			continue
		}
		if err != nil || c.mount != tc.mount || (c.original != tc.original && tc.err == "" && !strings.Contains(tc.name, "warning")) {
			t.Errorf("%s: mount %q original %q err %v; want mount %q original %q", tc.name, c.mount, c.original, err, tc.mount, tc.original)
		}
		if strings.Contains(tc.name, "warning") {
			if v := testutil.ToFloat64(m.seLinuxMetrics.podMismatchWarnings.WithLabelValues("inline")); v != 1 {
				t.Errorf("%s: pod_context_mismatch_warnings_total = %v", tc.name, v)
			}
		}
	}
}

// Two pods sharing a volume must agree on its label: the second one with another label is
// refused with the kubelet's message and counted; the same label, or a plugin without
// context mounts, is no conflict.
func TestSELinuxConflictBetweenPods(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := &Manager{dsw: newDesiredState(), seLinuxEnabled: true, seLinuxMetrics: newSELinuxMetrics(reg)}
	spec := rwoSpec(v1.ReadWriteOnce)
	name := v1.UniqueVolumeName("test/shared/pv")
	first := seLinuxPod("a", nil, "s0:c1,c2")
	c1, _ := m.chooseSELinux(&seLinuxPlugin{supports: true}, spec, containerSELinuxOptions(first)["data"], first)
	m.dsw.setPod(first, []DesiredVolume{{Name: name, Spec: spec, OuterNames: []string{"data"}, SELinuxLabel: c1.mount, seLinuxOriginal: c1.original}}, nil)

	same := seLinuxPod("b", nil, "s0:c1,c2")
	cs, _ := m.chooseSELinux(&seLinuxPlugin{supports: true}, spec, containerSELinuxOptions(same)["data"], same)
	if err := m.seLinuxConflict(name, "test/shared", spec, same.UID, cs); err != nil {
		t.Errorf("same label: %v", err)
	}
	differs := seLinuxPod("c", nil, "s0:c3,c4")
	cd, _ := m.chooseSELinux(&seLinuxPlugin{supports: true}, spec, containerSELinuxOptions(differs)["data"], differs)
	err := m.seLinuxConflict(name, "test/shared", spec, differs.UID, cd)
	want := `conflicting SELinux labels of volume pv: "system_u:object_r:container_file_t:s0:c1,c2" and "system_u:object_r:container_file_t:s0:c3,c4"`
	if err == nil || err.Error() != want {
		t.Errorf("conflict: %v, want %s", err, want)
	}
	if v := testutil.ToFloat64(m.seLinuxMetrics.volumeMismatchErrors.WithLabelValues("test/shared", "RWO")); v != 1 {
		t.Errorf("volume_context_mismatch_errors_total = %v", v)
	}
	// The pod itself is no conflict with its own earlier entry.
	if err := m.seLinuxConflict(name, "test/shared", spec, first.UID, cd); err != nil {
		t.Errorf("a pod conflicts with itself: %v", err)
	}
	cn, _ := m.chooseSELinux(&seLinuxPlugin{}, spec, containerSELinuxOptions(differs)["data"], differs)
	if err := m.seLinuxConflict(name, "test/shared", spec, differs.UID, cn); err != nil {
		t.Errorf("plugin without context mounts: %v", err)
	}
}

// A pod with seLinuxChangePolicy Recursive and a pod with MountOption (same level) sharing
// a volume conflict, in either order: the kubelet compares the label each pod mounts with
// ("" for Recursive), not the containers' label (upstream csi-mock "should not mount ... with
// different policy").
func TestSELinuxConflictBetweenPolicies(t *testing.T) {
	recursive, mountOption := v1.SELinuxChangePolicyRecursive, v1.SELinuxChangePolicyMountOption
	const label = "system_u:object_r:container_file_t:s0:c1,c2"
	for _, tc := range []struct {
		name          string
		first, second *v1.PodSELinuxChangePolicy
		want          string
	}{
		{"MountOption then Recursive", &mountOption, &recursive, `conflicting SELinux labels of volume pv: "` + label + `" and ""`},
		{"Recursive then MountOption", &recursive, &mountOption, `conflicting SELinux labels of volume pv: "" and "` + label + `"`},
		{"Recursive then Recursive", &recursive, &recursive, ""},
	} {
		m := &Manager{dsw: newDesiredState(), seLinuxEnabled: true, seLinuxMetrics: newSELinuxMetrics(prometheus.NewRegistry())}
		spec := rwoSpec(v1.ReadWriteOnce)
		name := v1.UniqueVolumeName("test/shared/pv")
		plugin := &seLinuxPlugin{supports: true}
		first := seLinuxPod("a", tc.first, "s0:c1,c2")
		c1, _ := m.chooseSELinux(plugin, spec, containerSELinuxOptions(first)["data"], first)
		m.dsw.setPod(first, []DesiredVolume{{Name: name, Spec: spec, OuterNames: []string{"data"}, SELinuxLabel: c1.mount, seLinuxOriginal: c1.original}}, nil)
		second := seLinuxPod("b", tc.second, "s0:c1,c2")
		c2, _ := m.chooseSELinux(plugin, spec, containerSELinuxOptions(second)["data"], second)
		err := m.seLinuxConflict(name, "test/shared", spec, second.UID, c2)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.want)
		}
	}
}

// The access_mode label of the SELinux metrics has upstream's values (getVolumeAccessMode):
// the broadest of the PV's modes, abbreviated, or "inline".
func TestSELinuxAccessMode(t *testing.T) {
	for _, tc := range []struct {
		spec *volume.Spec
		want string
	}{
		{volume.SpecFromVolume(&v1.Volume{Name: "data"}), "inline"},
		{rwoSpec(v1.ReadWriteOncePod), "RWOP"},
		{rwoSpec(v1.ReadWriteOnce, v1.ReadWriteOncePod), "RWO"},
		{rwoSpec(v1.ReadOnlyMany, v1.ReadWriteOnce), "ROX"},
		{rwoSpec(v1.ReadWriteOnce, v1.ReadWriteMany, v1.ReadOnlyMany), "RWX"},
		{rwoSpec(), ""},
	} {
		if got := seLinuxAccessMode(tc.spec); got != tc.want {
			t.Errorf("%s %v: access_mode %q, want %q", tc.spec.Name(), tc.want, got, tc.want)
		}
	}
}
