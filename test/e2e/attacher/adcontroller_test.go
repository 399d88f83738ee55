package attacher

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// The real attach/detach controller of kube-controller-manager drives kubevol's attacher: a
// pod on a controller-managed node makes it create the VolumeAttachment, the attacher
// publishes it, and deleting the pod (no kubelet reports the volume in use) detaches it.
func TestWithAttachDetachController(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	ns := framework.Namespace(t)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        e.node,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
	}}
	e.create(func() error { _, err := e.cs.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); return err })
	t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	csiDriver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: e.name},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)},
	}
	e.create(func() error {
		_, err := e.cs.StorageV1().CSIDrivers().Create(e.ctx, csiDriver, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = e.cs.StorageV1().CSIDrivers().Delete(context.Background(), csiDriver.Name, metav1.DeleteOptions{})
	})
	e.registerNode()

	pv := e.volume()
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &empty,
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	e.create(func() error {
		_, err := e.cs.CoreV1().PersistentVolumeClaims(ns).Create(e.ctx, pvc, metav1.CreateOptions{})
		return err
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   e.node,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
			}}},
		},
	}
	// The ServiceAccount admission plugin rejects pods until the namespace's default
	// ServiceAccount exists.
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}

	vaName := fmt.Sprintf("csi-%x", sha256sum(pv.Spec.CSI.VolumeHandle+e.name+e.node))
	got := e.waitVA(vaName, "created by the attach/detach controller and attached", func(v *storagev1.VolumeAttachment) bool {
		return v != nil && v.Status.Attached
	})
	if got.Spec.Source.PersistentVolumeName == nil || *got.Spec.Source.PersistentVolumeName != pv.Name {
		t.Errorf("VolumeAttachment source = %+v, want PV %s", got.Spec.Source, pv.Name)
	}
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
		return err == nil && len(n.Status.VolumesAttached) == 1, nil
	})
	if err != nil {
		t.Errorf("node.status.volumesAttached never listed the volume: %v", err)
	}

	if err := e.cs.CoreV1().Pods(ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	e.waitVA(vaName, "detached and deleted after the pod went", func(v *storagev1.VolumeAttachment) bool { return v == nil })
	want := []string{"ControllerPublishVolume:OK", "ControllerUnpublishVolume:OK"}
	if calls := e.calls(pv.Spec.CSI.VolumeHandle); fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("driver calls = %v, want %v", calls, want)
	}
}
