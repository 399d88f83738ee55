package plugins_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/mount-utils"

	"golang.org/x/sys/unix"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins/local"
)

// mountOf is the mountinfo line of the mount point dir ("" if dir is not one).
func mountOf(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == dir {
			return sc.Text()
		}
	}
	return ""
}

// An image volume is the runtime's: the node sets up nothing and the volume is ready.
func TestImageVolumeIsANoOp(t *testing.T) {
	e := newEnv(t, false)
	vol := v1.Volume{Name: "img", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "registry.k8s.io/pause:3.10"}}}
	pod := testPod(vol)
	m, err := e.setUp(t, pod, vol, volume.MounterArgs{})
	if err != nil {
		t.Fatalf("SetUp of an image volume: %v", err)
	}
	if m.Path() != "" || !m.Attributes().ReadOnly {
		t.Errorf("image volume path %q, attributes %+v; want no path, read-only", m.Path(), m.Attributes())
	}
	if entries, _ := os.ReadDir(filepath.Join(e.root, "pods")); len(entries) != 0 {
		t.Errorf("an image volume left %v on the node", entries)
	}
	e.tearDown(t, pod, vol)
}

// A HugePages emptyDir is a hugetlbfs with the page size the pod's containers request.
func TestEmptyDirHugePages(t *testing.T) {
	e := newEnv(t, true)
	hp := func(name string, medium v1.StorageMedium) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium}}}
	}
	requests := func(p *v1.Pod, sizes ...string) *v1.Pod {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{}
		for _, s := range sizes {
			p.Spec.Containers[0].Resources.Requests[v1.ResourceName("hugepages-"+s)] = resource.MustParse("2Mi")
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		medium   v1.StorageMedium
		sizes    []string
		podSizes []string // pod-level spec.resources.requests (PodLevelResources)
		want     string   // page size in the mount options, or the error
	}{
		{"plain", v1.StorageMediumHugePages, []string{"2Mi"}, nil, "pagesize=2M"},
		{"sized", "HugePages-2Mi", []string{"2Mi", "1Gi"}, nil, "pagesize=2M"},
		{"no request", v1.StorageMediumHugePages, nil, nil, "there is no resource request for huge pages"},
		{"sized without its request", "HugePages-1Gi", []string{"2Mi"}, nil, "there is no resource request for huge pages"},
		{"two sizes", v1.StorageMediumHugePages, []string{"2Mi", "1Gi"}, nil, "can't be used if container requests multiple huge page sizes"},
		{"pod level", v1.StorageMediumHugePages, nil, []string{"2Mi"}, "pagesize=2M"},
		{"sized, pod level", "HugePages-2Mi", nil, []string{"2Mi"}, "pagesize=2M"},
		{"pod level and another container size", v1.StorageMediumHugePages, []string{"1Gi"}, []string{"2Mi"}, "can't be used if container requests multiple huge page sizes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := hp("hp", tc.medium)
			pod := requests(testPod(vol), tc.sizes...)
			if tc.podSizes != nil {
				pod.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{}}
				for _, s := range tc.podSizes {
					pod.Spec.Resources.Requests[v1.ResourceName("hugepages-"+s)] = resource.MustParse("2Mi")
				}
			}
			spec := volume.SpecFromVolume(&vol)
			p, _ := e.pm.FindBySpec(spec)
			m, err := p.NewMounter(spec, pod)
			if err == nil {
				// Whatever the case expects, a hugetlbfs this SetUp mounted goes (a case
				// wanting an error that mounted instead failed and left it).
				t.Cleanup(func() {
					if mountOf(t, m.Path()) != "" {
						e.tearDown(t, pod, vol)
					}
				})
				err = m.SetUp(context.Background(), volume.MounterArgs{})
			}
			if !strings.HasPrefix(tc.want, "pagesize=") {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("SetUp error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			line := mountOf(t, m.Path())
			if !strings.Contains(line, " - hugetlbfs ") || !strings.Contains(line, tc.want) {
				t.Fatalf("mount of %s: %q, want hugetlbfs with %s", m.Path(), line, tc.want)
			}
			if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
				t.Fatalf("second SetUp: %v", err)
			}
			e.tearDown(t, pod, vol)
			if mountOf(t, m.Path()) != "" {
				t.Fatal("hugetlbfs still mounted after TearDown")
			}
		})
	}
}

func localPV(name, path string, block bool) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: path}},
	}}
	if block {
		mode := v1.PersistentVolumeBlock
		pv.Spec.VolumeMode = &mode
	}
	return pv
}

// localSetUp runs the volume manager's sequence for a local PV: MountDevice, then SetUp.
func (e *env) localSetUp(t *testing.T, spec *volume.Spec, pod *v1.Pod) (volume.Mounter, string, error) {
	t.Helper()
	dm, err := e.pm.FindDeviceMountable(spec)
	if err != nil || dm == nil {
		t.Fatalf("local plugin is not device-mountable: %v", err)
	}
	d, _ := dm.NewDeviceMounter()
	global, err := d.DeviceMountPath(spec)
	if err != nil {
		return nil, "", err
	}
	if err := d.MountDevice(context.Background(), spec, "", global, volume.MounterArgs{}); err != nil {
		return nil, global, err
	}
	var m volume.Mounter
	if spec.Block() {
		bp, _ := e.pm.FindBlockByName(local.PluginName)
		m, err = bp.NewBlockMapper(spec, pod)
	} else {
		p, _ := e.pm.FindBySpec(spec)
		m, err = p.NewMounter(spec, pod)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m, global, m.SetUp(context.Background(), volume.MounterArgs{FsGroup: ptr(int64(1234))})
}

// A directory local PV is bind-mounted into the pod, with fsGroup; its path is checked as
// the kubelet does.
func TestLocalDirectory(t *testing.T) {
	e := newEnv(t, true)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	spec := volume.SpecFromPersistentVolume(localPV("pv-dir", dir, false), false)
	m, global, err := e.localSetUp(t, spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	if global != dir {
		t.Errorf("device mount path %s, want the directory %s", global, dir)
	}
	if data, _ := readFile(t, filepath.Join(m.Path(), "data")); data != "local" || mountOf(t, m.Path()) == "" {
		t.Fatalf("pod dir %s is not a bind mount of %s (%q)", m.Path(), dir, data)
	}
	// After a restart the PV's path comes back from the bind mount.
	p, _ := e.pm.FindBySpec(spec)
	got, err := p.ConstructVolumeSpec("pv-dir", m.Path())
	if err != nil || got.PersistentVolume.Spec.Local.Path != dir {
		t.Errorf("ConstructVolumeSpec = %+v, %v; want path %s", got, err, dir)
	}
	u, _ := p.NewUnmounter("pv-dir", pod.UID)
	if err := u.TearDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.Path()); !os.IsNotExist(err) || mountOf(t, m.Path()) != "" {
		t.Errorf("pod dir left after TearDown: %v", err)
	}
	if data, _ := readFile(t, filepath.Join(dir, "data")); data != "local" {
		t.Error("TearDown touched the local volume's data")
	}

	file := filepath.Join(dir, "data")
	for path, want := range map[string]string{
		"":                      "path is empty",
		"relative/dir":          "is not absolute",
		dir + "/../x":           "must not contain '..'",
		filepath.Join(dir, "x"): "does not exist",
		file:                    "is neither a directory nor a block device",
	} {
		_, _, err := e.localSetUp(t, volume.SpecFromPersistentVolume(localPV("bad", path, false), false), pod)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("local path %q: error %v, want %q", path, err, want)
		}
	}
}

// loopDevice attaches a fresh 32 MiB file as a loop device, detached at the end.
func loopDevice(t *testing.T) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// A local PV on a block device: as a filesystem it is formatted and mounted once at the
// plugin's global mount, then bound into the pod; in Block mode the device is mapped.
func TestLocalBlockDevice(t *testing.T) {
	e := newEnv(t, true)
	dev := loopDevice(t)
	pod := testPod()
	ctx := context.Background()

	spec := volume.SpecFromPersistentVolume(localPV("pv-fs", dev, false), false)
	m, global, err := e.localSetUp(t, spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(e.root, "plugins/kubernetes.io/local-volume/mounts/pv-fs"); global != want {
		t.Errorf("global mount %s, want %s", global, want)
	}
	if line := mountOf(t, global); !strings.Contains(line, " - ext4 "+dev) {
		t.Fatalf("global mount %q, want ext4 on %s", line, dev)
	}
	if err := os.WriteFile(filepath.Join(m.Path(), "f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write through the pod's mount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(global, "f")); err != nil {
		t.Fatalf("pod mount is not the global mount: %v", err)
	}
	dm, _ := e.pm.FindDeviceMountable(spec)
	if refs, _ := dm.DeviceMountRefs(global); len(refs) != 1 {
		t.Errorf("DeviceMountRefs with one pod = %v", refs)
	}
	p, _ := e.pm.FindBySpec(spec)
	u, _ := p.NewUnmounter("pv-fs", pod.UID)
	if err := u.TearDown(ctx); err != nil {
		t.Fatal(err)
	}
	du, _ := dm.NewDeviceUnmounter()
	if err := du.UnmountDevice(ctx, global); err != nil {
		t.Fatal(err)
	}
	if mountOf(t, global) != "" {
		t.Fatal("global mount left")
	}

	bspec := volume.SpecFromPersistentVolume(localPV("pv-blk", dev, true), false)
	bm, _, err := e.localSetUp(t, bspec, pod)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(e.root, "pods/uid-1/volumeDevices/kubernetes.io~local-volume/pv-blk")
	if bm.Path() != link {
		t.Errorf("block path %s, want %s", bm.Path(), link)
	}
	if info, err := os.Stat(link); err != nil || info.Mode()&os.ModeDevice == 0 {
		t.Fatalf("pod link %s is not the device: %v", link, err)
	}
	bp, _ := e.pm.FindBlockByName(local.PluginName)
	if got, err := bp.ConstructBlockVolumeSpec("pv-blk", link); err != nil || got.PersistentVolume.Spec.Local.Path != dev || !got.Block() {
		t.Errorf("ConstructBlockVolumeSpec = %+v, %v; want %s", got, err, dev)
	}
	bu, _ := bp.NewBlockUnmapper("pv-blk", pod.UID)
	if err := bu.TearDown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("pod link left: %v", err)
	}
	// A directory cannot be a Block-mode local PV.
	if _, _, err := e.localSetUp(t, volume.SpecFromPersistentVolume(localPV("pv-dirblk", t.TempDir(), true), false), pod); err == nil ||
		!strings.Contains(err.Error(), "needs a block device") {
		t.Errorf("Block mode on a directory: %v", err)
	}
}

// A local PV's mountOptions are added to the pod's bind mount (upstream JoinMountOptions with
// "bind"), and its fsGroup is applied by the first pod only: a second pod sharing the
// volume with another fsGroup does not change the volume's group (upstream local plugin).
func TestLocalDirectorySharedByPods(t *testing.T) {
	e := newEnv(t, true)
	dir := t.TempDir()
	pv := localPV("pv-shared", dir, false)
	pv.Spec.MountOptions = []string{"noexec"}
	spec := volume.SpecFromPersistentVolume(pv, false)
	p, _ := e.pm.FindBySpec(spec)
	var mounted []volume.Mounter
	defer func() {
		for _, m := range mounted {
			_ = mount.CleanupMountPoint(m.Path(), mount.New(""), false)
		}
	}()
	setUp := func(uid types.UID, group int64) volume.Mounter {
		t.Helper()
		m := setUpWithGroup(t, p, spec, uid, group)
		mounted = append(mounted, m)
		return m
	}
	first := setUp("uid-1", 1000)
	if fields := strings.Fields(mountOf(t, first.Path())); len(fields) < 6 || !slices.Contains(strings.Split(fields[5], ","), "noexec") {
		t.Errorf("bind mount of %s: %v, want the PV's mount option noexec", first.Path(), fields)
	}
	setUp("uid-2", 2000)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Gid != 1000 {
		t.Errorf("volume group %d after a second pod with fsGroup 2000, want the first pod's 1000", st.Gid)
	}
}

// setUpWithGroup sets spec up for a test pod of uid with fsGroup group.
func setUpWithGroup(t *testing.T, p volume.Plugin, spec *volume.Spec, uid types.UID, group int64) volume.Mounter {
	t.Helper()
	pod := testPod()
	pod.UID = uid
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(context.Background(), volume.MounterArgs{FsGroup: ptr(group)}); err != nil {
		t.Fatal(err)
	}
	return m
}

// A local PV mounted for one pod and set up for another pod with another fsGroup keeps its
// group and warns the second pod with upstream's AlreadyMountedVolume event; the same group,
// or no other pod, is no warning.
func TestLocalAlreadyMountedVolumeEvent(t *testing.T) {
	root := t.TempDir()
	rec := record.NewFakeRecorder(10)
	pm := volume.NewPluginManager(volume.HostConfig{Paths: volume.Paths{Root: root}, Mounter: mount.NewFakeMounter(nil), Recorder: rec})
	if err := pm.Register(local.New()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	gid := int64(st.Gid)
	spec := volume.SpecFromPersistentVolume(localPV("pv-shared", dir, false), false)
	p, err := pm.FindBySpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	events := func() []string {
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
	setUpWithGroup(t, p, spec, "uid-1", gid)
	setUpWithGroup(t, p, spec, "uid-2", gid)
	if got := events(); len(got) != 0 {
		t.Errorf("events for pods with the volume's group: %q", got)
	}
	setUpWithGroup(t, p, spec, "uid-3", gid+1)
	want := fmt.Sprintf("Warning AlreadyMountedVolume The requested fsGroup is %d, but the volume pv-shared has GID %d. The volume may not be shareable.", gid+1, gid)
	if got := events(); len(got) != 1 || got[0] != want {
		t.Errorf("events for a pod with another fsGroup: %q, want %q", got, want)
	}
}
