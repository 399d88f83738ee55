package csi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/pkg/volume"
)

func blockSpec() *volume.Spec {
	spec := pvSpec()
	mode := v1.PersistentVolumeBlock
	spec.PersistentVolume.Spec.VolumeMode = &mode
	spec.ReadOnly = false
	return spec
}

// A block volume is staged, published and mapped in the kubelet's volumeDevices layout, and
// every path is gone after the teardown.
func TestBlockMapUnmap(t *testing.T) {
	no := false
	ctx := context.Background()
	f := newFixture(t,
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pub"}, Data: map[string][]byte{"token": []byte("s3cret")}},
	)
	spec := blockSpec()
	csiDir := filepath.Join(f.root, "plugins/kubernetes.io/csi/volumeDevices")
	dm, _ := f.plugin.NewDeviceMounter()
	staging, _ := dm.DeviceMountPath(spec)
	if want := filepath.Join(csiDir, "staging/pv1"); staging != want {
		t.Errorf("staging path = %s, want %s", staging, want)
	}
	if err := dm.MountDevice(ctx, spec, "", staging, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	stage := f.node.taken()[0].(*csipb.NodeStageVolumeRequest)
	if stage.VolumeCapability.GetBlock() == nil || stage.StagingTargetPath != staging {
		t.Errorf("NodeStage request = %v", stage)
	}
	if _, err := os.Stat(filepath.Join(csiDir, "pv1/data/vol_data.json")); err != nil {
		t.Errorf("data file: %v", err)
	}

	bm, err := f.plugin.NewBlockMapper(spec, testPod())
	if err != nil {
		t.Fatal(err)
	}
	if err := bm.SetUp(ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(csiDir, "publish/pv1/uid-1")
	pub := f.node.taken()[0].(*csipb.NodePublishVolumeRequest)
	if pub.TargetPath != target || pub.StagingTargetPath != staging || pub.VolumeCapability.GetBlock() == nil || pub.Secrets["token"] != "s3cret" {
		t.Errorf("NodePublish request = %v", pub)
	}
	link := filepath.Join(f.root, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv1")
	if bm.Path() != link {
		t.Errorf("Path() = %s, want %s", bm.Path(), link)
	}
	if got, err := os.Readlink(link); err != nil || got != target {
		t.Errorf("pod link -> %q, %v; want %s", got, err, target)
	}
	devRef := filepath.Join(csiDir, "pv1/dev/uid-1")
	if mps, _ := f.mounter.List(); len(mps) != 1 || mps[0].Path != devRef || mps[0].Device != target {
		t.Errorf("mounts = %+v, want a bind of %s at %s", mps, target, devRef)
	}
	if refs, _ := f.plugin.DeviceMountRefs(staging); len(refs) != 1 || refs[0] != devRef {
		t.Errorf("DeviceMountRefs = %v, want [%s]", refs, devRef)
	}

	// After a restart the spec comes back from disk as a block volume.
	got, err := f.plugin.ConstructBlockVolumeSpec("pv1", link)
	if err != nil || !got.Block() || got.PersistentVolume.Spec.CSI.VolumeHandle != "vol-1" {
		t.Fatalf("ConstructBlockVolumeSpec = %+v, %v", got, err)
	}

	u, _ := f.plugin.NewBlockUnmapper("pv1", "uid-1")
	if err := u.TearDown(ctx); err != nil {
		t.Fatal(err)
	}
	unpub := f.node.taken()[0].(*csipb.NodeUnpublishVolumeRequest)
	if unpub.TargetPath != target || unpub.VolumeId != "vol-1" {
		t.Errorf("NodeUnpublish request = %v", unpub)
	}
	if mps, _ := f.mounter.List(); len(mps) != 0 {
		t.Errorf("mounts left: %+v", mps)
	}
	if refs, _ := f.plugin.DeviceMountRefs(staging); len(refs) != 0 {
		t.Errorf("DeviceMountRefs after unmap = %v", refs)
	}
	du, _ := f.plugin.NewDeviceUnmounter()
	if err := du.UnmountDevice(ctx, staging); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.node.taken()[0].(*csipb.NodeUnstageVolumeRequest); !ok {
		t.Error("no NodeUnstage")
	}
	for _, p := range []string{link, target, filepath.Join(csiDir, "publish/pv1"), filepath.Join(csiDir, "pv1"), staging} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

// A loop device that the kubelet's own volume manager attached over a pod's device file
// (its reference to a mapped block volume) is detached by the teardown, which could not
// unmount the file otherwise.
func TestDetachLoopReferences(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for a loop device; run the tests as root")
	}
	file := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(file, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", file).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })
	backing := filepath.Join("/sys/block", filepath.Base(loop), "loop", "backing_file")
	if _, err := os.Stat(backing); err != nil {
		t.Fatalf("%s attached but %v", loop, err)
	}
	if err := detachLoopReferences(file); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(backing)
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Fatalf("%s still backed by %s", loop, file)
	}
}
