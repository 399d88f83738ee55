package volumestats

import (
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

// fsNode answers NodeGetVolumeStats as a driver of "dir" volumes does: the bytes and inodes
// of the filesystem under the path (statfs), with the bytes and files used measured by
// walking the tree, so the figures the collector reports come from a real filesystem.
type fsNode struct {
	csipb.NodeClient
	paths []string // the volume paths asked for, in order
}

func (n *fsNode) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest, _ ...grpc.CallOption) (*csipb.NodeGetVolumeStatsResponse, error) {
	n.paths = append(n.paths, req.GetVolumePath())
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		return nil, err
	}
	used, files, err := du(req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	total := int64(st.Blocks) * st.Bsize
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: total, Available: int64(st.Bavail) * st.Bsize, Used: used},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: files},
	}}, nil
}

// du is the apparent size of the regular files below dir and the number of entries.
func du(dir string) (bytes, files int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			bytes += info.Size()
		}
		return nil
	})
	return bytes, files, err
}

type fakeDrivers struct {
	node *fsNode
	caps map[string]bool // driver → GET_VOLUME_STATS
}

func (d fakeDrivers) Node(_ context.Context, driver string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	return d.node, map[csipb.NodeServiceCapability_RPC_Type]bool{csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS: d.caps[driver]}, nil
}

// manager is the States of a fake actual state.
type manager struct{ asw volumemanager.ActualState }

func (m manager) ActualState() volumemanager.ActualState { return m.asw }

// fakeState is an actual state of mounted volumes, as the manager's view returns it; the
// methods the collector does not call are left to the nil embedded interface.
type fakeState struct {
	volumemanager.ActualState
	volumes map[v1.UniqueVolumeName]volumemanager.AttachedVolume
	mounts  map[types.UID][]volumemanager.MountedVolume
}

// PodUIDs is sorted, so pod-a's mount of a shared claim is the one asked for.
func (s *fakeState) PodUIDs() []types.UID {
	return slices.Sorted(maps.Keys(s.mounts))
}

func (s *fakeState) PodVolumes(uid types.UID) []volumemanager.MountedVolume { return s.mounts[uid] }

func (s *fakeState) Volume(name v1.UniqueVolumeName) (volumemanager.AttachedVolume, bool) {
	v, ok := s.volumes[name]
	return v, ok
}

func (s *fakeState) add(uid types.UID, specName string, mv volumemanager.MountedVolume, spec *volume.Spec) {
	mv.PodUID, mv.SpecName = uid, specName
	if mv.PluginName == "" {
		mv.PluginName = csiplugin.PluginName
	}
	if mv.State == "" {
		mv.State = volumemanager.VolumeMounted
	}
	s.volumes[mv.Name] = volumemanager.AttachedVolume{Name: mv.Name, PluginName: mv.PluginName, Spec: spec}
	s.mounts[uid] = append(s.mounts[uid], mv)
}

func csiPV(driver, handle, ns, claim string) *volume.Spec {
	pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
	}}
	pv.Name = "pv-" + handle
	if claim != "" {
		pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: ns, Name: claim}
	}
	return volume.SpecFromPersistentVolume(pv, false)
}

// writeTree makes files of known sizes below dir and returns their total size.
func writeTree(t *testing.T, dir string, sizes map[string]int) int64 {
	t.Helper()
	var total int64
	for name, size := range sizes {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o644); err != nil {
			t.Fatal(err)
		}
		total += int64(size)
	}
	return total
}

func TestCollectorReportsClaimsFromTheFilesystem(t *testing.T) {
	paths := volume.Paths{Root: t.TempDir()}
	st := &fakeState{volumes: map[v1.UniqueVolumeName]volumemanager.AttachedVolume{}, mounts: map[types.UID][]volumemanager.MountedVolume{}}
	// data: one claim mounted by two pods, reported once.
	st.add("pod-a", "data", volumemanager.MountedVolume{Name: "kubernetes.io/csi/d^h1"}, csiPV("d", "h1", "ns", "data"))
	st.add("pod-b", "data", volumemanager.MountedVolume{Name: "kubernetes.io/csi/d^h1"}, csiPV("d", "h1", "ns", "data"))
	// Not reported: an inline volume (no claim), a mount still uncertain, another plugin's
	// volume, and a volume of a driver without GET_VOLUME_STATS.
	st.add("pod-a", "inline", volumemanager.MountedVolume{Name: "kubernetes.io/csi/pod-a-inline"}, csiPV("d", "h2", "", ""))
	st.add("pod-a", "uncertain", volumemanager.MountedVolume{Name: "kubernetes.io/csi/d^h3", State: volumemanager.VolumeMountUncertain}, csiPV("d", "h3", "ns", "uncertain"))
	st.add("pod-a", "host", volumemanager.MountedVolume{Name: "kubernetes.io/local-volume/l", PluginName: "kubernetes.io/local-volume"}, csiPV("d", "h4", "ns", "host"))
	st.add("pod-a", "nostats", volumemanager.MountedVolume{Name: "kubernetes.io/csi/e^h5"}, csiPV("e", "h5", "ns", "nostats"))

	target := csiplugin.TargetPath(paths, "pod-a", "data", false)
	want := writeTree(t, target, map[string]int{"a": 4096, "b": 100, "sub/c": 12345, "sub/deeper/d": 1})
	node := &fsNode{}
	c := NewCollector(manager{st}, fakeDrivers{node: node, caps: map[string]bool{"d": true}}, paths, nil)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range got {
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %d series, want the one claim", mf.GetName(), len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] != "ns" || labels["persistentvolumeclaim"] != "data" {
			t.Errorf("%s labels %v", mf.GetName(), labels)
		}
		values[mf.GetName()] = m.GetGauge().GetValue()
	}
	if len(node.paths) != 1 || node.paths[0] != target {
		t.Fatalf("NodeGetVolumeStats asked for %v, want once for %s", node.paths, target)
	}

	var fs unix.Statfs_t
	if err := unix.Statfs(target, &fs); err != nil {
		t.Fatal(err)
	}
	if v := values["kubelet_volume_stats_used_bytes"]; v != float64(want) {
		t.Errorf("used bytes %v, want %d (the files written)", v, want)
	}
	if v := values["kubelet_volume_stats_inodes_used"]; v != 7 { // mount, sub, sub/deeper and 4 files
		t.Errorf("inodes used %v, want 7", v)
	}
	if v := values["kubelet_volume_stats_capacity_bytes"]; v != float64(int64(fs.Blocks)*fs.Bsize) {
		t.Errorf("capacity %v, want the filesystem's %d", v, int64(fs.Blocks)*fs.Bsize)
	}
	if v := values["kubelet_volume_stats_inodes"]; v != float64(fs.Files) {
		t.Errorf("inodes %v, want the filesystem's %d", v, fs.Files)
	}
	// Free space moves with everything else on the machine: it only has to be plausible.
	if v := values["kubelet_volume_stats_available_bytes"]; v <= 0 || v > values["kubelet_volume_stats_capacity_bytes"] {
		t.Errorf("available bytes %v", v)
	}
	if n := testutil.CollectAndCount(c); n != 6 {
		t.Errorf("%d series, want 6", n)
	}
}

// A block volume is asked for at its publish path under volumeDevices, not a pod volume dir.
func TestCollectorAsksBlockVolumesAtTheirDevicePath(t *testing.T) {
	paths := volume.Paths{Root: t.TempDir()}
	st := &fakeState{volumes: map[v1.UniqueVolumeName]volumemanager.AttachedVolume{}, mounts: map[types.UID][]volumemanager.MountedVolume{}}
	st.add("pod-a", "raw", volumemanager.MountedVolume{Name: "kubernetes.io/csi/d^b1", Block: true}, csiPV("d", "b1", "ns", "raw"))
	target := csiplugin.TargetPath(paths, "pod-a", "raw", true)
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	node := &fsNode{}
	if n := testutil.CollectAndCount(NewCollector(manager{st}, fakeDrivers{node: node, caps: map[string]bool{"d": true}}, paths, nil)); n != 6 {
		t.Errorf("%d series, want 6", n)
	}
	if len(node.paths) != 1 || node.paths[0] != target {
		t.Errorf("asked for %v, want %s", node.paths, target)
	}
}
