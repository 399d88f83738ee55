package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// An inline ephemeral CSI volume (published straight to the pod, no stage) and a generic
// ephemeral volume (a PVC made by kube-controller-manager's ephemeral-volume controller,
// then a normal PV-backed volume) are both mounted, and both go away with the pod.
func TestEphemeralVolumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.waitRegistered()
	inline := corev1.Volume{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: e.name, VolumeAttributes: map[string]string{"type": "dir", "size": "8Mi"},
	}}}
	generic := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &e.sc,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		}},
	}}}
	pod := e.waitVolumesReady(e.pod("app", inline, generic))

	inlineTarget := filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", "inline", "mount")
	if !isMountPoint(inlineTarget) {
		t.Errorf("inline volume %s is not a mount point", inlineTarget)
	}
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(e.ctx, pod.Name+"-scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the ephemeral-volume controller's PVC: %v", err)
	}
	genericTarget := filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pvc.Spec.VolumeName, "mount")
	if !isMountPoint(genericTarget) {
		t.Errorf("generic ephemeral volume %s is not a mount point", genericTarget)
	}
	if err := os.WriteFile(filepath.Join(inlineTarget, "f"), []byte("x"), 0o644); err != nil {
		t.Errorf("write to the inline volume: %v", err)
	}
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	e.deletePod(pod)
	// The PVC is owned by the pod; the garbage collector deletes it, and then the PV.
	e.poll("generic ephemeral PV deleted", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	var inlineID string
	for _, c := range e.calls() {
		if c.Method == "NodePublishVolume" && c.Path == inlineTarget {
			inlineID = c.VolumeID
		}
	}
	if got := e.succeeded(inlineID); inlineID == "" || !slices.Contains(got, "NodeUnpublishVolume") || slices.Contains(got, "NodeStageVolume") {
		t.Errorf("inline volume %q calls = %v, want NodePublish and NodeUnpublish without a stage", inlineID, got)
	}
	if err := inOrder(e.succeeded(pv.Spec.CSI.VolumeHandle), []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}); err != nil {
		t.Errorf("generic ephemeral volume: %v", err)
	}
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
