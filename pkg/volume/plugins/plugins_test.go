package plugins_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins"
	"github.com/kubevol/kubevol/pkg/volume/plugins/emptydir"
)

type env struct {
	pm      *volume.PluginManager
	root    string
	mounter mount.Interface
	cms     map[string]*v1.ConfigMap
	secrets map[string]*v1.Secret
	tokens  int
	// allocatable is the node's, 1Gi of memory unless a test changes it.
	allocatable v1.ResourceList
}

func newEnv(t *testing.T, realMounts bool) *env {
	t.Helper()
	e := &env{root: t.TempDir(), cms: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{},
		allocatable: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}
	e.mounter = mount.NewFakeMounter(nil)
	if realMounts {
		if os.Geteuid() != 0 {
			t.Skip("needs root for tmpfs mounts")
		}
		e.mounter = volume.NewMounter()
	}
	e.pm = volume.NewPluginManager(volume.HostConfig{
		Paths:   volume.Paths{Root: e.root},
		Mounter: e.mounter,
		ConfigMapGetter: func(ns, name string) (*v1.ConfigMap, error) {
			if cm, ok := e.cms[ns+"/"+name]; ok {
				return cm, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
		},
		SecretGetter: func(ns, name string) (*v1.Secret, error) {
			if s, ok := e.secrets[ns+"/"+name]; ok {
				return s, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
		},
		TokenGetter: func(_ context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			e.tokens++
			out := req.DeepCopy()
			out.Status.Token = "token-" + ns + "-" + sa
			out.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
			return out, nil
		},
		NodeAllocatableFunc: func() v1.ResourceList { return e.allocatable },
	})
	if err := e.pm.Register(plugins.All()...); err != nil {
		t.Fatal(err)
	}
	return e
}

func testPod(vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "x"}},
		Spec:       v1.PodSpec{Volumes: vols, Containers: []v1.Container{{Name: "c"}}},
	}
}

func (e *env) setUp(t *testing.T, pod *v1.Pod, vol v1.Volume, args volume.MounterArgs) (volume.Mounter, error) {
	t.Helper()
	spec := volume.SpecFromVolume(&vol)
	p, err := e.pm.FindBySpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	return m, m.SetUp(context.Background(), args)
}

func (e *env) tearDown(t *testing.T, pod *v1.Pod, vol v1.Volume) {
	t.Helper()
	p, _ := e.pm.FindBySpec(volume.SpecFromVolume(&vol))
	u, err := p.NewUnmounter(vol.Name, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.TearDown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) (string, os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	info, _ := os.Stat(p)
	return string(data), info.Mode().Perm()
}

func ptr[T any](v T) *T { return &v }

func TestConfigMap(t *testing.T) {
	e := newEnv(t, false)
	e.cms["ns/cm"] = &v1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"bin": {0, 1, 2}}}
	vol := v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, DefaultMode: ptr(int32(0o640)),
		Items: []v1.KeyToPath{{Key: "a", Path: "dir/a"}, {Key: "bin", Path: "bin", Mode: ptr(int32(0o600))}},
	}}}
	pod := testPod(vol)
	m, err := e.setUp(t, pod, vol, volume.MounterArgs{})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(e.root, "pods/uid-1/volumes/kubernetes.io~configmap/cfg")
	if m.Path() != want {
		t.Fatalf("path %s, want %s", m.Path(), want)
	}
	if data, mode := readFile(t, filepath.Join(want, "dir/a")); data != "1" || mode != 0o640 {
		t.Errorf("dir/a = %q %v", data, mode)
	}
	if data, mode := readFile(t, filepath.Join(want, "bin")); data != "\x00\x01\x02" || mode != 0o600 {
		t.Errorf("bin = %q %v", data, mode)
	}
	if _, err := os.Lstat(filepath.Join(want, "b")); !os.IsNotExist(err) {
		t.Errorf("b projected without an item: %v", err)
	}

	// Update and remount.
	e.cms["ns/cm"].Data["a"] = "changed"
	if _, err := e.setUp(t, pod, vol, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := readFile(t, filepath.Join(want, "dir/a")); data != "changed" {
		t.Errorf("update not applied: %q", data)
	}
	e.tearDown(t, pod, vol)
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Errorf("volume dir left after TearDown: %v", err)
	}
}

func TestConfigMapMissingAndOptional(t *testing.T) {
	e := newEnv(t, false)
	vol := v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}}
	pod := testPod(vol)
	if _, err := e.setUp(t, pod, vol, volume.MounterArgs{}); err == nil {
		t.Fatal("missing configmap accepted")
	}
	if _, err := os.Stat(filepath.Join(e.root, "pods")); !os.IsNotExist(err) {
		t.Errorf("failed SetUp left files: %v", err)
	}
	vol.ConfigMap.Optional = ptr(true)
	if _, err := e.setUp(t, pod, vol, volume.MounterArgs{}); err != nil {
		t.Fatalf("optional missing configmap: %v", err)
	}
}

func TestBadItemPathWritesNothing(t *testing.T) {
	e := newEnv(t, false)
	e.secrets["ns/s"] = &v1.Secret{Data: map[string][]byte{"k": []byte("v")}}
	outside := filepath.Join(e.root, "escaped")
	for _, p := range []string{"../../../../escaped", outside, "a/../../escaped"} {
		vol := v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s", Items: []v1.KeyToPath{{Key: "k", Path: p}}}}}
		if _, err := e.setUp(t, testPod(vol), vol, volume.MounterArgs{}); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the volume")
	}
}

func TestSecretOnTmpfsWithFsGroup(t *testing.T) {
	e := newEnv(t, true)
	e.secrets["ns/s"] = &v1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}}
	vol := v1.Volume{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s", DefaultMode: ptr(int32(0o400))}}}
	pod := testPod(vol)
	t.Cleanup(func() { e.tearDown(t, pod, vol) })
	m, err := e.setUp(t, pod, vol, volume.MounterArgs{FsGroup: ptr(int64(1234))})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.Path(), &st); err != nil || st.Type != 0x01021994 {
		t.Errorf("secret volume is not a tmpfs (type %x, %v)", st.Type, err)
	}
	data, mode := readFile(t, filepath.Join(m.Path(), "password"))
	if data != "hunter2" || mode != 0o440 { // 0400 | g+r from fsGroup
		t.Errorf("password = %q %v", data, mode)
	}
	info, _ := os.Stat(filepath.Join(m.Path(), "password"))
	if gid := info.Sys().(*syscall.Stat_t).Gid; gid != 1234 {
		t.Errorf("gid %d, want 1234", gid)
	}
	e.tearDown(t, pod, vol)
	if mounted, _ := mount.New("").IsMountPoint(m.Path()); mounted {
		t.Error("tmpfs still mounted after TearDown")
	}
}

func TestEmptyDirMemorySize(t *testing.T) {
	e := newEnv(t, true)
	vol := v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("64Mi"))}}}
	pod := testPod(vol)
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("32Mi")}
	t.Cleanup(func() { e.tearDown(t, pod, vol) })
	m, err := e.setUp(t, pod, vol, volume.MounterArgs{FsGroup: ptr(int64(123))})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if size := st.Blocks * uint64(st.Bsize); size != 32<<20 {
		t.Errorf("tmpfs size %d, want the pod limit 32Mi", size)
	}
	// The kubelet's tmpfs keeps the kernel's sticky bit, and fsGroup adds setgid: the
	// conformance spec "nonexistent volume subPath should have the correct mode and owner
	// using FSGroup" reads dgtrwxrwxrwx.
	info, _ := os.Stat(m.Path())
	if want := os.ModeDir | os.ModeSetgid | os.ModeSticky | 0o777; info.Mode() != want {
		t.Errorf("mode %v, want %v", info.Mode(), want)
	}
	// Data survives a second SetUp (remount, restart).
	os.WriteFile(filepath.Join(m.Path(), "data"), []byte("x"), 0o644)
	if _, err := e.setUp(t, pod, vol, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := readFile(t, filepath.Join(m.Path(), "data")); data != "x" {
		t.Error("second SetUp lost data")
	}
}

// A sizeLimit beyond int64, with nothing smaller to bound it, gets the kernel's default
// size: never size=0 (no limit at all, what Value() made of 1e30) nor a negative size. A
// fraction of a byte rounds up, as the kubelet's Value().
func TestEmptyDirHostileSizeLimit(t *testing.T) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	ram := uint64(si.Totalram) * uint64(si.Unit)
	for i, limit := range []string{"1e30", "9223372036854775808", "8Ei", "123456789012345678901234567890", "1.5"} {
		t.Run(limit, func(t *testing.T) {
			e := newEnv(t, true)
			e.allocatable = nil
			vol := v1.Volume{Name: fmt.Sprintf("mem%d", i), VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse(limit))}}}
			pod := testPod(vol)
			t.Cleanup(func() { e.tearDown(t, pod, vol) })
			m, err := e.setUp(t, pod, vol, volume.MounterArgs{})
			if err != nil {
				t.Fatal(err)
			}
			var st syscall.Statfs_t
			if err := syscall.Statfs(m.Path(), &st); err != nil || st.Type != 0x01021994 {
				t.Fatalf("not a tmpfs (type %x, %v)", st.Type, err)
			}
			size := st.Blocks * uint64(st.Bsize)
			switch {
			case limit == "1.5" && size != uint64(os.Getpagesize()):
				t.Errorf("tmpfs size %d, want one page", size)
			case limit != "1.5" && (size == 0 || size > ram):
				t.Errorf("tmpfs size %d (0 is unlimited), want the kernel's default of half the RAM (%d)", size, ram/2)
			}
		})
	}
}

func TestMemorySize(t *testing.T) {
	pod := testPod()
	alloc := v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	if q := emptydir.MemorySize(pod, nil, alloc); q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("no limits: %v", q)
	}
	if q := emptydir.MemorySize(pod, ptr(resource.MustParse("10Mi")), alloc); q.Cmp(resource.MustParse("10Mi")) != 0 {
		t.Errorf("sizeLimit: %v", q)
	}
	// A sizeLimit beyond int64 limits nothing, and is not compared (1e10000000 would take seconds).
	for _, huge := range []string{"1e30", "8Ei", "1e10000000"} {
		if q := emptydir.MemorySize(pod, ptr(resource.MustParse(huge)), alloc); q.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Errorf("sizeLimit %s: %v", huge, q)
		}
	}
}

func TestDownwardAPIAndProjected(t *testing.T) {
	e := newEnv(t, false)
	e.cms["ns/cm"] = &v1.ConfigMap{Data: map[string]string{"c": "cm"}}
	e.secrets["ns/s"] = &v1.Secret{Data: map[string][]byte{"s": []byte("sec")}}
	vol := v1.Volume{Name: "all", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o444)),
		Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3600))}},
		},
	}}}
	pod := testPod(vol)
	m, err := e.setUp(t, pod, vol, volume.MounterArgs{FsUser: ptr(int64(1000))})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"c": "cm", "s": "sec", "labels": `app="x"`, "token": "token-ns-default"} {
		if data, _ := readFile(t, filepath.Join(m.Path(), name)); data != want {
			t.Errorf("%s = %q, want %q", name, data, want)
		}
	}
	if _, mode := readFile(t, filepath.Join(m.Path(), "token")); mode != 0o600 {
		t.Errorf("token mode %v, want 0600 with runAsUser", mode)
	}
	r, ok := m.(volume.Refresher)
	if !ok {
		t.Fatal("projected mounter is not a Refresher")
	}
	if d := r.RefreshAfter(); d < 47*time.Minute || d > 48*time.Minute {
		t.Errorf("refresh after %v, want 80%% of 1h", d)
	}
	// A remount reuses the token.
	if _, err := e.setUp(t, pod, vol, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if e.tokens != 1 {
		t.Errorf("%d token requests, want 1", e.tokens)
	}
}

func TestHostPathTypes(t *testing.T) {
	e := newEnv(t, false)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	cases := []struct {
		path string
		typ  v1.HostPathType
		ok   bool
	}{
		{dir, v1.HostPathDirectory, true},
		{file, v1.HostPathDirectory, false},
		{file, v1.HostPathFile, true},
		{dir, v1.HostPathFile, false},
		{filepath.Join(dir, "new/dir"), v1.HostPathDirectoryOrCreate, true},
		{filepath.Join(dir, "new2/file"), v1.HostPathFileOrCreate, true},
		{filepath.Join(dir, "missing"), v1.HostPathDirectory, false},
		{file, v1.HostPathSocket, false},
		{"/dev/null", v1.HostPathCharDev, true},
		{"/dev/null", v1.HostPathBlockDev, false},
		{dir + "/../x", v1.HostPathUnset, false},
	}
	for _, c := range cases {
		vol := v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: c.path, Type: ptr(c.typ)}}}
		_, err := e.setUp(t, testPod(vol), vol, volume.MounterArgs{})
		if (err == nil) != c.ok {
			t.Errorf("%s as %q: err %v, want ok=%v", c.path, c.typ, err, c.ok)
		}
	}
	if info, err := os.Stat(filepath.Join(dir, "new/dir")); err != nil || !info.IsDir() {
		t.Error("DirectoryOrCreate did not create")
	}
	if info, err := os.Stat(filepath.Join(dir, "new2/file")); err != nil || !info.Mode().IsRegular() || info.Mode().Perm() != 0o644 {
		t.Error("FileOrCreate did not create a 0644 file")
	}
}
