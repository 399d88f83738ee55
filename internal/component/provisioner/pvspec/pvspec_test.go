package pvspec

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

func TestVolumeName(t *testing.T) {
	uid := "3b7c2f5e-1d2a-4c3b-9e8f-0a1b2c3d4e5f"
	for _, tc := range []struct {
		prefix string
		n      int
		want   string
	}{
		{"pvc", -1, "pvc-" + uid},
		{"vol", 8, "vol-3b7c2f5e"},
		{"pvc", 32, "pvc-3b7c2f5e1d2a4c3b9e8f0a1b2c3d4e5f"},
	} {
		if got := VolumeName(tc.prefix, ktypes.UID(uid), tc.n); got != tc.want {
			t.Errorf("VolumeName(%q, %d) = %q, want %q", tc.prefix, tc.n, got, tc.want)
		}
	}
}

func TestBuildShape(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	retain := corev1.PersistentVolumeReclaimRetain
	class := "fast"
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", ResourceVersion: "7"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
			StorageClassName: &class,
			VolumeMode:       &block,
		},
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "d", ReclaimPolicy: &retain, MountOptions: []string{"noatime"}}
	pv := Build(Input{
		Name: "pvc-u1", Driver: "d", Identity: "id", Claim: claim, Class: sc, FSType: "ext4", Topology: true,
		Volume: &csi.Volume{VolumeId: "h", CapacityBytes: 1 << 30, VolumeContext: map[string]string{"a": "b"},
			AccessibleTopology: []*csi.Topology{{Segments: map[string]string{"zone": "z1", "rack": "r1"}}}},
		Secrets: Secrets{NodeStage: &corev1.SecretReference{Name: "s", Namespace: "n"}},
	})
	want := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-u1", Finalizers: []string{Finalizer}, Annotations: map[string]string{
			AnnProvisionedBy: "d", AnnDeletionSecretName: "", AnnDeletionSecretNamespace: ""}},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:  claim.Spec.AccessModes,
			MountOptions: []string{"noatime"},
			Capacity:     corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "d", VolumeHandle: "h", VolumeAttributes: map[string]string{"a": "b", IdentityAttribute: "id"},
				NodeStageSecretRef: &corev1.SecretReference{Name: "s", Namespace: "n"},
			}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "c", UID: "u1", ResourceVersion: "7"},
			StorageClassName:              class,
			VolumeMode:                    &block,
			PersistentVolumeReclaimPolicy: retain,
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}},
					{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}},
				}}}}},
		},
	}
	if !equality.Semantic.DeepEqual(pv, want) {
		t.Fatalf("PV differs:\ngot  %+v\nwant %+v", pv, want)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Format != resource.BinarySI {
		t.Errorf("capacity format %v", q.Format)
	}
	if err := SameVolume(pv, "d", claim, "h"); err != nil {
		t.Errorf("own PV rejected: %v", err)
	}
	if err := SameVolume(pv, "d", claim, "other"); err == nil {
		t.Error("PV for another handle accepted")
	}
	if err := SameVolume(pv, "other-driver", claim, "h"); err == nil {
		t.Error("PV of another driver accepted")
	}
}

func TestVolumeCapabilities(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany}}}
	caps, err := VolumeCapabilities(claim, "xfs", []string{"ro"}, false)
	if err != nil || len(caps) != 2 {
		t.Fatalf("%v %v", caps, err)
	}
	if caps[0].GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER ||
		caps[1].GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY ||
		caps[0].GetMount().GetFsType() != "xfs" {
		t.Fatalf("caps %v", caps)
	}
	claim.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	caps, _ = VolumeCapabilities(claim, "", nil, true)
	if caps[0].GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		t.Fatalf("RWOP with SINGLE_NODE_MULTI_WRITER: %v", caps)
	}
	claim.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{"ReadWriteSometimes"}
	if _, err := VolumeCapabilities(claim, "", nil, false); err == nil {
		t.Fatal("unknown access mode accepted")
	}
}

// The PV's capacity is the driver's, or the request when the driver reports none; a
// negative one (an overflowed driver) is never recorded.
func TestBuildCapacity(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1"}}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: "d"}
	for _, tc := range []struct{ reported, want int64 }{{2 << 20, 2 << 20}, {0, 1 << 20}, {-9223372036854771712, 1 << 20}} {
		pv := Build(Input{Name: "pvc-u1", Driver: "d", Claim: claim, Class: sc, RequestedBytes: 1 << 20,
			Volume: &csi.Volume{VolumeId: "h", CapacityBytes: tc.reported}})
		if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Value() != tc.want {
			t.Errorf("driver reports %d: PV capacity %s, want %d", tc.reported, got.String(), tc.want)
		}
	}
}

// The PV of a migrated claim is the driver's by its in-tree provisioned-by, or by the
// migrated-to kube-controller-manager adds; its handle is the translated volume ID. Another
// plugin's or driver's PV is not.
func TestProvisionedByMigrated(t *testing.T) {
	ebs := func(ann map[string]string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv", Annotations: ann}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "v-1"}}}}
	}
	for _, tc := range []struct {
		ann    map[string]string
		driver string
		want   bool
	}{
		{map[string]string{AnnProvisionedBy: "kubernetes.io/aws-ebs"}, "ebs.csi.aws.com", true},
		{map[string]string{AnnProvisionedBy: "kubernetes.io/aws-ebs", AnnMigratedTo: "ebs.csi.aws.com"}, "ebs.csi.aws.com", true},
		{map[string]string{AnnProvisionedBy: "kubernetes.io/aws-ebs"}, "local.kubevol.io", false},
		{map[string]string{AnnProvisionedBy: "kubernetes.io/gce-pd"}, "ebs.csi.aws.com", false},
		{map[string]string{AnnProvisionedBy: ""}, "local.kubevol.io", false},
		{nil, "ebs.csi.aws.com", false}, // a static in-tree PV is nobody's to delete
	} {
		if got := ProvisionedBy(ebs(tc.ann), tc.driver); got != tc.want {
			t.Errorf("ProvisionedBy(%v, %s) = %v, want %v", tc.ann, tc.driver, got, tc.want)
		}
	}
	if h := Handle(ebs(nil)); h != "v-1" {
		t.Errorf("Handle of an EBS PV = %q, want v-1", h)
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{UID: "u"}}
	pv := ebs(map[string]string{AnnProvisionedBy: "kubernetes.io/aws-ebs"})
	pv.Spec.ClaimRef = &corev1.ObjectReference{UID: "u"}
	if err := SameVolume(pv, "ebs.csi.aws.com", claim, "v-1"); err != nil {
		t.Errorf("SameVolume of the migrated PV: %v", err)
	}
	if err := SameVolume(pv, "ebs.csi.aws.com", claim, "v-2"); err == nil {
		t.Error("SameVolume accepts another volume")
	}
}
