package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/mount-utils"
)

// The checks of the new cases, each fed what a misbehaving driver or node would leave.

func TestCheckPVRefusesWhatTheClaimDidNotAskFor(t *testing.T) {
	fs := corev1.PersistentVolumeFilesystem
	good := func() *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &fs,
			StorageClassName:              "c",
			MountOptions:                  []string{"noatime"},
		}}
	}
	want := pvWant{size: resource.MustParse("20Mi"), access: corev1.ReadWriteOnce, reclaim: corev1.PersistentVolumeReclaimRetain, mode: fs, class: "c", options: []string{"noatime"}}
	if err := checkPV(good(), want); err != nil {
		t.Fatalf("a PV as asked for: %v", err)
	}
	for name, spoil := range map[string]func(*corev1.PersistentVolume){
		"capacity": func(pv *corev1.PersistentVolume) {
			pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("10Mi")
		},
		"access": func(pv *corev1.PersistentVolume) {
			pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		},
		"reclaim": func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		},
		"mode":    func(pv *corev1.PersistentVolume) { pv.Spec.VolumeMode = nil },
		"class":   func(pv *corev1.PersistentVolume) { pv.Spec.StorageClassName = "other" },
		"options": func(pv *corev1.PersistentVolume) { pv.Spec.MountOptions = nil },
	} {
		pv := good()
		spoil(pv)
		if err := checkPV(pv, want); err == nil {
			t.Errorf("%s: a wrong PV passes", name)
		}
	}
}

func TestCheckMountOptionsLooksAtTheLastMount(t *testing.T) {
	mps := []mount.MountPoint{{Path: "/p", Opts: []string{"rw", "noatime"}}, {Path: "/p", Opts: []string{"rw", "relatime"}}}
	if err := checkMountOptions(mps, "/p", []string{"noatime"}); err == nil || !strings.Contains(err.Error(), "noatime") {
		t.Errorf("options dropped by the driver: %v", err)
	}
	if err := checkMountOptions(mps[:1], "/p", []string{"noatime"}); err != nil {
		t.Error(err)
	}
	if err := checkMountOptions(mps, "/q", nil); err == nil {
		t.Error("no mount at all passes")
	}
}

func TestCheckFileCatchesTruncationAndCorruption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	sum, err := writeRandom(path, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkFile(path, 4096, sum); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	data[100] ^= 1
	_ = os.WriteFile(path, data, 0o644)
	if err := checkFile(path, 4096, sum); err == nil {
		t.Error("a flipped bit passes")
	}
	_ = os.WriteFile(path, data[:2048], 0o644)
	if err := checkFile(path, 4096, sum); err == nil {
		t.Error("a truncated file passes")
	}
}

func TestCheckGroupsRefusesAWalkThatDidNotHappen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	_ = os.WriteFile(file, nil, 0o644)
	_ = os.Chown(dir, -1, 4100)
	_ = os.Chmod(dir, 0o2775|os.ModeSetgid)
	_ = os.Chown(file, -1, 0)
	if err := checkGroups(dir, file, 4100, 0); err != nil {
		t.Fatal(err)
	}
	// A node that ignores OnRootMismatch and walks anyway (or ignores Always and does not).
	if err := checkGroups(dir, file, 4100, 4100); err == nil {
		t.Error("a file left unchanged passes where the walk was due")
	}
	if err := checkGroups(dir, file, 4200, 0); err == nil {
		t.Error("a root of the wrong group passes")
	}
}

func TestCheckGrowthRefusesACopyNotGrown(t *testing.T) {
	if err := checkGrowth(268<<20, 268<<20); err == nil {
		t.Error("a copy with its source's size passes")
	}
	if err := checkGrowth(268<<20, 536<<20); err != nil {
		t.Error(err)
	}
}

func TestCheckCapacitiesWantsTheNodesSegment(t *testing.T) {
	seg := map[string]string{"topology.kubevol.io/node": "n1"}
	q := resource.MustParse("1Gi")
	other := storagev1.CSIStorageCapacity{NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubevol.io/node": "n2"}}, Capacity: &q}
	mine := storagev1.CSIStorageCapacity{NodeTopology: &metav1.LabelSelector{MatchLabels: seg}, Capacity: &q}
	if err := checkCapacities([]storagev1.CSIStorageCapacity{other}, seg); err == nil {
		t.Error("capacity only for another segment passes")
	}
	if err := checkCapacities([]storagev1.CSIStorageCapacity{other, mine}, seg); err != nil {
		t.Error(err)
	}
	mine.Capacity = nil
	if err := checkCapacities([]storagev1.CSIStorageCapacity{mine}, seg); err == nil {
		t.Error("an object without capacity passes")
	}
}

func TestCheckLimitComparesCSINodeWithTheDriver(t *testing.T) {
	four := int32(4)
	if err := checkLimit(nil, 4); err == nil {
		t.Error("a node agent that drops the limit passes")
	}
	if err := checkLimit(&four, 5); err == nil {
		t.Error("a wrong count passes")
	}
	if err := checkLimit(&four, 0); err == nil {
		t.Error("a count the driver never reported passes")
	}
	if checkLimit(&four, 4) != nil || checkLimit(nil, 0) != nil {
		t.Error("a right count fails")
	}
}

// The SELinux case reads the context from the mount table as the kernel writes it (quoted,
// since the level has a comma); a driver that dropped the mount flag, or a mount of
// another label, fails.
func TestCheckSELinuxContext(t *testing.T) {
	dir := "/var/lib/kubevol/pods/u/volumes/kubernetes.io~csi/pv/mount"
	line := func(super string) []mount.MountInfo {
		path := filepath.Join(t.TempDir(), "mountinfo")
		l := "36 25 7:3 / " + dir + " rw,relatime shared:1 - ext4 /dev/loop3 " + super + "\n"
		if err := os.WriteFile(path, []byte(l), 0o644); err != nil {
			t.Fatal(err)
		}
		infos, err := mount.ParseMountInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		return infos
	}
	if err := checkSELinuxContext(line(`rw,seclabel,context="`+seLinuxLabel+`"`), dir, seLinuxLabel); err != nil {
		t.Errorf("a mount with the pod's context: %v", err)
	}
	for name, super := range map[string]string{
		"no context":    "rw,seclabel",
		"another label": `rw,seclabel,context="system_u:object_r:container_file_t:s0:c1,c2"`,
		"a cut label":   `rw,context="system_u:object_r:container_file_t:s0:c123",c456`,
	} {
		if err := checkSELinuxContext(line(super), dir, seLinuxLabel); err == nil || !strings.Contains(err.Error(), "did not mount the volume with the context mount flag") {
			t.Errorf("%s: %v, want the context missing", name, err)
		}
	}
	if err := checkSELinuxContext(line("rw"), "/elsewhere", seLinuxLabel); err == nil || !strings.Contains(err.Error(), "nothing mounted") {
		t.Errorf("no mount: %v", err)
	}
}
