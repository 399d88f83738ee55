package verify

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// A pod of an attach-required driver that waits for a volume the attach/detach controller
// never asked to attach leaves no event and no VolumeAttachment: the explanation names the
// missing one (a source and its clone in one pod, the source detached just before).
func TestStuckNamesMissingAttachment(t *testing.T) {
	const ns, node = "verify-x", "n1"
	claimVol := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
	}
	pv := func(name, claim string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: ns, Name: claim}}}
	}
	pvName := "pv-bigger"
	objs := []k8sruntime.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "both", Namespace: ns},
			Spec:   corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{claimVol("source"), claimVol("bigger")}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}},
		pv("pv-source", "source"), pv(pvName, "bigger"),
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-bigger"},
			Spec:   storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
			Status: storagev1.VolumeAttachmentStatus{Attached: true}},
	}
	for _, tc := range []struct {
		name   string
		attach bool
		want   []string
	}{
		{"attach required", true, []string{`pod both not ready: node "n1"`,
			"no VolumeAttachment of pv-source (claim source of pod both) on n1: the attach/detach controller has not asked for its attach"}},
		{"no attach", false, []string{`pod both not ready: node "n1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &caseEnv{env: &env{cs: fake.NewClientset(objs...), csiDriver: &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{AttachRequired: &tc.attach}}},
				ctx: context.Background(), ns: ns}
			got := k.stuck(context.Background())
			if len(got) != len(tc.want) {
				t.Fatalf("stuck = %q, want %d lines", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("line %d: %q, want %q", i, got[i], w)
				}
			}
		})
	}
}
