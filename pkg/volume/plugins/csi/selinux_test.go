package csi

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevol/kubevol/pkg/volume"
)

// The plugin supports SELinux context mounts exactly when the CSIDriver says seLinuxMount:
// true, and passes the label to NodeStage and NodePublish as the last mount flag, quoted,
// recording it in vol_data.json.
func TestSELinuxContextMount(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		support bool
	}{
		{"no CSIDriver", nil, false},
		{"seLinuxMount unset", []runtime.Object{&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}}}, false},
		{"seLinuxMount false", []runtime.Object{&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{SELinuxMount: &no}}}, false},
		{"seLinuxMount true", []runtime.Object{&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{SELinuxMount: &yes, AttachRequired: &no}}}, true},
	} {
		f := newFixture(t, append(tc.objs, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pub"}})...)
		if got, err := f.plugin.SupportsSELinuxContextMount(pvSpec()); got != tc.support || err != nil {
			t.Errorf("%s: SupportsSELinuxContextMount = %v, %v; want %v", tc.name, got, err, tc.support)
		}
	}

	ctx := context.Background()
	f := newFixture(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{SELinuxMount: &yes, AttachRequired: &no}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pub"}})
	spec := pvSpec()
	label := "system_u:object_r:container_file_t:s0:c1,c2"
	want := []string{"noatime", `context="system_u:object_r:container_file_t:s0:c1,c2"`}
	args := volume.MounterArgs{SELinuxLabel: label}
	dm, _ := f.plugin.NewDeviceMounter()
	staging, _ := dm.DeviceMountPath(spec)
	if err := dm.MountDevice(ctx, spec, "", staging, args); err != nil {
		t.Fatal(err)
	}
	stage := f.node.taken()[0].(*csipb.NodeStageVolumeRequest)
	if got := stage.VolumeCapability.GetMount().GetMountFlags(); !slices.Equal(got, want) {
		t.Errorf("NodeStage mount flags %q, want %q", got, want)
	}
	if raw, _ := os.ReadFile(filepath.Join(filepath.Dir(staging), "vol_data.json")); !strings.Contains(string(raw), `"seLinuxMountContext":"`+label+`"`) {
		t.Errorf("staging vol_data.json = %s", raw)
	}
	m, _ := f.plugin.NewMounter(spec, testPod())
	if err := m.SetUp(ctx, args); err != nil {
		t.Fatal(err)
	}
	pub := f.node.taken()[0].(*csipb.NodePublishVolumeRequest)
	if got := pub.VolumeCapability.GetMount().GetMountFlags(); !slices.Equal(got, want) {
		t.Errorf("NodePublish mount flags %q, want %q", got, want)
	}
	// The pod's vol_data.json records the context, which a restart reads back.
	if got, err := f.plugin.MountedSELinuxContext(filepath.Dir(m.Path())); got != label || err != nil {
		t.Errorf("MountedSELinuxContext = %q, %v; want %q", got, err, label)
	}
	if !slices.Equal(spec.PersistentVolume.Spec.MountOptions, []string{"noatime"}) {
		t.Errorf("the PV's mount options were changed: %q", spec.PersistentVolume.Spec.MountOptions)
	}
	// Without a label nothing is added.
	m2, _ := f.plugin.NewMounter(spec, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns", UID: "uid-2"}})
	if err := m2.SetUp(ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if got := f.node.taken()[0].(*csipb.NodePublishVolumeRequest).VolumeCapability.GetMount().GetMountFlags(); !slices.Equal(got, []string{"noatime"}) {
		t.Errorf("NodePublish mount flags without a label %q", got)
	}
	if got, err := f.plugin.MountedSELinuxContext(filepath.Dir(m2.Path())); got != "" || err != nil {
		t.Errorf("MountedSELinuxContext without a label = %q, %v", got, err)
	}
}
