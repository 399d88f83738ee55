package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// seLinuxPVPlugin is sharedPlugin for NFS persistent volumes, with SELinux context mounts:
// its device records the context it is staged with, and teardownGate, if set, holds every
// TearDown until it is closed.
type seLinuxPVPlugin struct {
	*sharedPlugin
	teardownGate chan struct{}
	// noDevice: each pod's SetUp mounts the volume, with no device mount (CSI without
	// STAGE_UNSTAGE_VOLUME).
	noDevice bool
}

func (p *seLinuxPVPlugin) CanDeviceMount(*volume.Spec) (bool, error) { return !p.noDevice, nil }

func (p *seLinuxPVPlugin) CanSupport(s *volume.Spec) bool {
	return s.PersistentVolume != nil && s.PersistentVolume.Spec.NFS != nil
}
func (p *seLinuxPVPlugin) VolumeName(s *volume.Spec) (string, error) {
	return s.PersistentVolume.Spec.NFS.Path, nil
}
func (p *seLinuxPVPlugin) SupportsSELinuxContextMount(*volume.Spec) (bool, error) { return true, nil }
func (p *seLinuxPVPlugin) NewDeviceMounter() (volume.DeviceMounter, error) {
	return seLinuxDevice{sharedDevice{p.sharedPlugin}}, nil
}
func (p *seLinuxPVPlugin) NewDeviceUnmounter() (volume.DeviceUnmounter, error) {
	return seLinuxDevice{sharedDevice{p.sharedPlugin}}, nil
}
func (p *seLinuxPVPlugin) NewUnmounter(name string, uid types.UID) (volume.Unmounter, error) {
	u, err := p.sharedPlugin.NewUnmounter(name, uid)
	return gatedUnmounter{u, p.teardownGate}, err
}

// NewMounter's SetUp records the context it was given, which MountedSELinuxContext reads
// back after a restart, as CSI's vol_data.json.
func (p *seLinuxPVPlugin) NewMounter(s *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	m, err := p.sharedPlugin.NewMounter(s, pod)
	return contextMounter{m}, err
}
func (p *seLinuxPVPlugin) MountedSELinuxContext(dir string) (string, error) {
	c, err := os.ReadFile(filepath.Join(dir, "selinux"))
	if os.IsNotExist(err) {
		return "", nil
	}
	return string(c), err
}
func (p *seLinuxPVPlugin) ConstructVolumeSpec(name, dir string) (*volume.Spec, error) {
	path, err := os.ReadFile(filepath.Join(dir, "vol_data"))
	if err != nil {
		return nil, err
	}
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Path: string(path)}}}}, false), nil
}

type contextMounter struct{ volume.Mounter }

func (m contextMounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	if err := m.Mounter.SetUp(ctx, args); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(m.Path(), "selinux"), []byte(args.SELinuxLabel), 0o600)
}

type seLinuxDevice struct{ sharedDevice }

func (d seLinuxDevice) DeviceMountPath(s *volume.Spec) (string, error) {
	return d.p.host.Paths().PluginDir("test/shared") + s.PersistentVolume.Spec.NFS.Path, nil
}
func (d seLinuxDevice) MountDevice(_ context.Context, _ *volume.Spec, _, _ string, args volume.MounterArgs) error {
	d.p.record("stage " + args.SELinuxLabel)
	return nil
}

type gatedUnmounter struct {
	volume.Unmounter
	gate chan struct{}
}

func (u gatedUnmounter) TearDown(ctx context.Context) error {
	if u.gate != nil {
		<-u.gate
	}
	return u.Unmounter.TearDown(ctx)
}

// createSELinuxClaim creates the claim "data" bound to the NFS PV pv1 of seLinuxPVPlugin.
// SELinux labels of the levels s0:c1,c2 (labelA) and s0:c3,c4 (labelB).
const (
	labelA = "system_u:object_r:container_file_t:s0:c1,c2"
	labelB = "system_u:object_r:container_file_t:s0:c3,c4"
)

// terminating marks the pod name deleted, as the API server does before its finalizers.
func terminating(t *testing.T, h *harness, name string) {
	t.Helper()
	ctx := context.Background()
	pod, err := h.client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("ns").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startSELinuxClaimPod starts a manager on an SELinux host with a plugin of context mounts
// and the claim "data", and returns once the pod name (uid), at level s0:c1,c2, is ready.
func startSELinuxClaimPod(t *testing.T, name string, uid types.UID) (*harness, *seLinuxPVPlugin) {
	t.Helper()
	sp := &seLinuxPVPlugin{sharedPlugin: &sharedPlugin{}}
	h := newHarness(t)
	enabled := true
	h.seLinux = &enabled
	h.extra = []volume.Plugin{sp}
	createSELinuxClaim(t, h)
	h.start()
	h.create(seLinuxClaimPod(name, uid, "s0:c1,c2"))
	h.eventually(name+" ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready[uid] == 1 }) })
	return h, sp
}

func createSELinuxClaim(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "pvc-uid"},
		Spec:   v1.PersistentVolumeClaimSpec{VolumeName: "pv1"},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "pvc-uid"},
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/vol1"}}}}
	if _, err := h.client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// seLinuxClaimPod is a pod of the claim "data" whose containers run with the SELinux level.
func seLinuxClaimPod(name string, uid types.UID, level string) *v1.Pod {
	p := pod(name, uid, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	p.Spec.SecurityContext = &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Level: level}}
	return p
}

// A volume staged with one pod's SELinux context is not reused for a pod that needs another
// one: once the old pod's unmount is done, the device is unstaged and staged again with the
// new context before the new pod's SetUp (upstream: a device mounted with another context
// is not in the desired state).
func TestSELinuxContextChangeRestagesDevice(t *testing.T) {
	h, sp := startSELinuxClaimPod(t, "old", "uid-old")

	// The old pod goes, its TearDown held, and the new pod, with another context, arrives.
	sp.teardownGate = make(chan struct{})
	terminating(t, h, "old")
	h.create(seLinuxClaimPod("new", "uid-new", "s0:c3,c4"))
	// The manager takes the new pod while the old one holds the volume.
	h.eventually("the new pod wanted", func() bool { return len(h.m.DesiredState().PodVolumes("uid-new")) > 0 })
	close(sp.teardownGate)
	h.eventually("new ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-new"] == 1 }) })

	want := []string{"stage " + labelA, "setup old", "teardown uid-old", "unstage", "stage " + labelB, "setup new"}
	if got := sp.events(); !slices.Equal(got, want) {
		t.Errorf("operations %q, want %q", got, want)
	}
}

// A running pod whose context changes has its volume unmounted, unstaged and staged again
// with the new context, instead of waiting forever for an unmount of its own mount.
func TestSELinuxContextChangeOfRunningPod(t *testing.T) {
	ctx := context.Background()
	h, sp := startSELinuxClaimPod(t, "p", "uid-p")
	p, _ := h.client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	p.Spec.SecurityContext.SELinuxOptions.Level = "s0:c3,c4"
	if _, err := h.client.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"stage " + labelA, "setup p", "teardown uid-p", "unstage", "stage " + labelB, "setup p"}
	h.eventually("remounted with the new context", func() bool { return len(sp.events()) >= len(want) })
	if got := sp.events(); !slices.Equal(got, want) {
		t.Errorf("operations %q, want %q", got, want)
	}
}

// After a restart the context a volume was mounted with is read back from the plugin: a new
// pod that needs another one still gets the volume unstaged and staged again with its own,
// instead of the reconstructed (uncertain) device being staged over with the new context.
func TestSELinuxContextSurvivesRestart(t *testing.T) {
	h, sp := startSELinuxClaimPod(t, "old", "uid-old")

	// While the manager is down, the old pod starts terminating and the new one arrives.
	h.stop()
	terminating(t, h, "old")
	h.create(seLinuxClaimPod("new", "uid-new", "s0:c3,c4"))
	h.obs = newObserver()
	h.start()
	h.eventually("new ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-new"] == 1 }) })
	want := []string{"stage " + labelA, "setup old", "teardown uid-old", "unstage", "stage " + labelB, "setup new"}
	if got := sp.events(); !slices.Equal(got, want) {
		t.Errorf("operations %q, want %q", got, want)
	}
}

// Without a device mount (the volume is the pod's own), a pod whose context changes has its
// volume torn down and set up again with the new context as soon as the volume is
// forgotten, not at the next resync.
func TestSELinuxContextChangeWithoutDevice(t *testing.T) {
	ctx := context.Background()
	sp := &seLinuxPVPlugin{sharedPlugin: &sharedPlugin{}, noDevice: true}
	h := newHarness(t)
	enabled := true
	h.seLinux = &enabled
	h.extra = []volume.Plugin{sp}
	createSELinuxClaim(t, h)
	h.start()
	h.create(seLinuxClaimPod("p", "uid-p", "s0:c1,c2"))
	h.eventually("ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-p"] == 1 }) })
	p, _ := h.client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	p.Spec.SecurityContext.SELinuxOptions.Level = "s0:c3,c4"
	if _, err := h.client.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"setup p", "teardown uid-p", "setup p"}
	h.eventually("set up again", func() bool { return len(sp.events()) >= len(want) })
	if got := sp.events(); !slices.Equal(got, want) {
		t.Errorf("operations %q, want %q", got, want)
	}
}
