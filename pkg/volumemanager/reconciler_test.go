package volumemanager

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// sharedPlugin is a device-mountable plugin for hostPath-like volumes whose path names the
// volume, so two pods share one volume name, as CSI volumes do.
type sharedPlugin struct {
	host volume.Host
	mu   sync.Mutex
	log  []string
	// setUpErrs are returned by the next SetUp calls, in order.
	setUpErrs []error
	// gate, if set, holds every SetUp until it is closed.
	gate chan struct{}
	// unstageGate, if set, holds UnmountDevice (after its "unstage" record) until closed.
	unstageGate chan struct{}
}

func (p *sharedPlugin) nextSetUpErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.setUpErrs) == 0 {
		return nil
	}
	err := p.setUpErrs[0]
	p.setUpErrs = p.setUpErrs[1:]
	return err
}

func (p *sharedPlugin) record(s string) { p.mu.Lock(); p.log = append(p.log, s); p.mu.Unlock() }
func (p *sharedPlugin) events() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
}

func (p *sharedPlugin) Init(h volume.Host) error          { p.host = h; return nil }
func (p *sharedPlugin) Name() string                      { return "test/shared" }
func (p *sharedPlugin) CanSupport(s *volume.Spec) bool    { return nfsSource(s) != nil }
func (p *sharedPlugin) RequiresRemount(*volume.Spec) bool { return false }
func (p *sharedPlugin) VolumeName(s *volume.Spec) (string, error) {
	return nfsSource(s).Path, nil
}

// nfsSource is the NFS source of an inline volume or a PV, which sharedPlugin serves.
func nfsSource(s *volume.Spec) *v1.NFSVolumeSource {
	switch {
	case s.Volume != nil:
		return s.Volume.NFS
	case s.PersistentVolume != nil:
		return s.PersistentVolume.Spec.NFS
	}
	return nil
}
func (p *sharedPlugin) CanDeviceMount(*volume.Spec) (bool, error) { return true, nil }
func (p *sharedPlugin) NewDeviceMounter() (volume.DeviceMounter, error) {
	return sharedDevice{p}, nil
}
func (p *sharedPlugin) NewDeviceUnmounter() (volume.DeviceUnmounter, error) {
	return sharedDevice{p}, nil
}
func (p *sharedPlugin) DeviceMountRefs(string) ([]string, error) { return nil, nil }
func (p *sharedPlugin) NewMounter(s *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	return &sharedMounter{p: p, pod: pod.Name, dir: p.host.Paths().PodVolumeDir(pod.UID, p.Name(), s.Name())}, nil
}
func (p *sharedPlugin) NewUnmounter(name string, uid types.UID) (volume.Unmounter, error) {
	return &sharedMounter{p: p, pod: string(uid), dir: p.host.Paths().PodVolumeDir(uid, p.Name(), name)}, nil
}

// ConstructVolumeSpec reads the volume's identity back from its metadata file, as CSI
// does from vol_data.json.
func (p *sharedPlugin) ConstructVolumeSpec(name, dir string) (*volume.Spec, error) {
	path, err := os.ReadFile(dir + "/vol_data")
	if err != nil {
		return nil, err
	}
	return volume.SpecFromVolume(&v1.Volume{Name: name, VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Path: string(path)}}}), nil
}

type sharedDevice struct{ p *sharedPlugin }

func (d sharedDevice) DeviceMountPath(s *volume.Spec) (string, error) {
	return d.p.host.Paths().PluginDir("test/shared") + nfsSource(s).Path, nil
}
func (d sharedDevice) MountDevice(context.Context, *volume.Spec, string, string, volume.MounterArgs) error {
	d.p.record("stage")
	return nil
}
func (d sharedDevice) UnmountDevice(context.Context, string) error {
	d.p.record("unstage")
	if d.p.unstageGate != nil {
		<-d.p.unstageGate
	}
	return nil
}

type sharedMounter struct {
	p   *sharedPlugin
	pod string
	dir string
}

func (m *sharedMounter) Path() string                  { return m.dir }
func (m *sharedMounter) Attributes() volume.Attributes { return volume.Attributes{} }
func (m *sharedMounter) SetUp(context.Context, volume.MounterArgs) error {
	m.p.record("setup " + m.pod)
	if m.p.gate != nil {
		<-m.p.gate
	}
	if err := m.p.nextSetUpErr(); err != nil {
		return err
	}
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return err
	}
	return os.WriteFile(m.dir+"/vol_data", []byte("/vol1"), 0o600)
}
func (m *sharedMounter) TearDown(context.Context) error {
	m.p.record("teardown " + m.pod)
	return os.RemoveAll(m.dir)
}

func sharedVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/vol1"}}}
}

// A shared volume moves from a deleted pod to a new one: the old pod's unmount comes
// before the new pod's mount, the device is staged once and unstaged at the end.
func TestUnmountBeforeMountAndDeviceTeardown(t *testing.T) {
	sp := &sharedPlugin{}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	h.start()
	h.create(pod("old", "uid-old", sharedVolume("data")))
	h.eventually("old ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-old"] == 1 }) })
	if got := h.m.asw.VolumePods("test/shared//vol1"); len(got) != 1 {
		t.Fatalf("unique name: %+v", got)
	}

	// While the manager is down, the old pod starts terminating and the new one arrives:
	// on restart both are known before anything is reconciled.
	h.stop()
	old, _ := h.client.CoreV1().Pods("ns").Get(context.Background(), "old", metav1.GetOptions{})
	now := metav1.Now()
	old.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("ns").Update(context.Background(), old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.create(pod("new", "uid-new", sharedVolume("data")))
	h.obs = newObserver()
	h.start()
	h.eventually("new ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-new"] == 1 }) })
	h.eventually("old torn down", func() bool { return h.obs.get(func(o *observer) bool { return o.tornDown["uid-old"] == 1 }) })
	ev := sp.events()
	idx := func(s string) int {
		for i, e := range ev {
			if e == s {
				return i
			}
		}
		return -1
	}
	if idx("teardown uid-old") < 0 || idx("setup new") < idx("teardown uid-old") {
		t.Errorf("mount before unmount: %v", ev)
	}
	if n := countOf(ev, "unstage"); n != 0 {
		t.Errorf("unstaged while in use: %v", ev)
	}
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "new", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("unstaged", func() bool { return countOf(sp.events(), "unstage") == 1 })
	h.eventually("volume forgotten", func() bool { return !h.m.ActualState().IsAttached("test/shared//vol1") })
}

// A pod that arrives while the device of its volume is being unmounted (the last user just
// went) is mounted as soon as that unmount ends: the device unmount wakes the volume's users
// as a pod unmount does, instead of leaving the pod to the next resync.
func TestMountAfterDeviceUnmount(t *testing.T) {
	sp := &sharedPlugin{unstageGate: make(chan struct{})}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	h.start()
	h.create(pod("old", "uid-old", sharedVolume("data")))
	h.eventually("old ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-old"] == 1 }) })
	old, _ := h.client.CoreV1().Pods("ns").Get(context.Background(), "old", metav1.GetOptions{})
	now := metav1.Now()
	old.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("ns").Update(context.Background(), old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("unstage started", func() bool { return countOf(sp.events(), "unstage") == 1 })
	h.create(pod("new", "uid-new", sharedVolume("data")))
	// The manager takes the new pod's mount while the unmount holds the volume.
	h.eventually("the new pod wanted", func() bool { return len(h.m.DesiredState().PodVolumes("uid-new")) > 0 })
	close(sp.unstageGate)
	h.eventually("new ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-new"] == 1 }) })
}

// attachablePlugin is sharedPlugin with a controller-side attach, as CSI with attachRequired.
type attachablePlugin struct{ *sharedPlugin }

func (p attachablePlugin) CanAttach(*volume.Spec) (bool, error) { return true, nil }
func (p attachablePlugin) NewAttacher() (volume.Attacher, error) {
	return sharedAttacher{sharedDevice{p.sharedPlugin}}, nil
}

type sharedAttacher struct{ sharedDevice }

func (sharedAttacher) WaitForAttach(context.Context, *volume.Spec, string, *v1.Pod) (string, error) {
	return "/dev/test", nil
}

// node.status.volumesInUse must drop an attachable volume as soon as its device is unmounted
// (upstream: the kubelet's status update follows the actual state), or the attach/detach
// controller waits for the next periodic node status to detach it.
func TestVolumesInUseDropsUnmountedDevice(t *testing.T) { testVolumesInUseDrops(t, false) }

// The same after a restart: a reconstructed attachable volume is attachable (the kubelet's
// reconstruction asks the plugin), so its unstage drops it from volumesInUse at once too.
func TestVolumesInUseDropsReconstructedDevice(t *testing.T) { testVolumesInUseDrops(t, true) }

func testVolumesInUseDrops(t *testing.T, restart bool) {
	sp := &sharedPlugin{}
	h := newHarness(t)
	h.extra = []volume.Plugin{attachablePlugin{sp}}
	var mu sync.Mutex
	var reported []v1.UniqueVolumeName
	calls := 0
	// The node agent's part: report what the manager says is in use, then tell it.
	h.inUseChanged = func() {
		go func() {
			inUse := h.m.VolumesInUse()
			mu.Lock()
			reported = inUse
			calls++
			mu.Unlock()
			h.m.MarkVolumesReportedInUse(inUse)
		}()
	}
	h.start()
	h.create(pod("app", "uid-app", sharedVolume("data")))
	h.eventually("ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-app"] == 1 }) })
	if restart {
		h.stop()
	}
	mu.Lock()
	calls = 0
	mu.Unlock()
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if restart {
		h.obs = newObserver()
		h.start()
	}
	h.eventually("unstaged", func() bool { return countOf(sp.events(), "unstage") == 1 })
	h.eventually("volumesInUse emptied after the unstage", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls > 0 && len(reported) == 0
	})
}

func countOf(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}

// A SetUp that times out leaves the volume uncertain: it is retried until it succeeds, and a
// pod deleted meanwhile still gets TearDown, so nothing that may be mounted is forgotten.
func TestUncertainMountIsRetriedAndTornDown(t *testing.T) {
	sp := &sharedPlugin{setUpErrs: []error{volume.NewUncertainError(errors.New("NodePublish timed out"))}}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	h.start()
	h.create(pod("p", "uid-p", sharedVolume("data")))
	h.eventually("failure reported", func() bool {
		return h.obs.get(func(o *observer) bool { return strings.Contains(o.failed["uid-p"], "timed out") })
	})
	h.eventually("ready after the retry", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-p"] == 1 }) })

	sp.mu.Lock()
	sp.setUpErrs = []error{volume.NewUncertainError(errors.New("timed out again"))}
	sp.mu.Unlock()
	h.create(pod("q", "uid-q", v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/vol2"}}}))
	h.eventually("q uncertain", func() bool {
		mv, ok := h.m.ActualState().PodVolume("uid-q", "test/shared//vol2")
		return ok && mv.State == VolumeMountUncertain
	})
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "q", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("q torn down", func() bool { return countOf(sp.events(), "teardown uid-q") == 1 })
	h.eventually("q unstaged", func() bool { return !h.m.ActualState().IsAttached("test/shared//vol2") })
}

// A pod whose volume was staged but never set up (a final SetUp error: the driver refused
// NodePublish) and is then deleted: the device is unstaged at once, not at the next resync,
// as the kubelet's reconciler unmounts a device no pod uses within its 100 ms loop.
func TestDeviceOfNeverMountedPodUnstaged(t *testing.T) {
	refused := errors.New("NodePublishVolume refused: volume_capability.access_type is required")
	sp := &sharedPlugin{setUpErrs: []error{refused, refused, refused, refused, refused, refused, refused, refused}}
	h := newHarness(t)
	h.extra = []volume.Plugin{sp}
	h.start()
	h.create(pod("p", "uid-p", sharedVolume("data")))
	h.eventually("failure reported", func() bool {
		return h.obs.get(func(o *observer) bool { return strings.Contains(o.failed["uid-p"], "refused") })
	})
	if n := countOf(sp.events(), "stage"); n != 1 {
		t.Fatalf("staged %d times, want once: %v", n, sp.events())
	}
	if err := h.client.CoreV1().Pods("ns").Delete(context.Background(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("unstaged", func() bool { return countOf(sp.events(), "unstage") == 1 })
	h.eventually("volume forgotten", func() bool { return !h.m.ActualState().IsAttached("test/shared//vol1") })
}
