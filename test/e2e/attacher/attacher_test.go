package attacher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A VolumeAttachment is published through the driver, its status carries the driver's
// publish context, both it and the PV hold the attacher's finalizer, and deleting it
// unpublishes and releases both.
func TestAttachDetach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.registerNode()
	pv := e.volume()
	va := e.attachment(pv)

	got := e.waitVA(va.Name, "attached", func(v *storagev1.VolumeAttachment) bool { return v != nil && v.Status.Attached })
	if !hasFinalizer(got.Finalizers, e.finalizer()) {
		t.Errorf("attached VolumeAttachment finalizers %v lack %s", got.Finalizers, e.finalizer())
	}
	if id := got.Annotations["csi.alpha.kubernetes.io/node-id"]; id != "csi-"+e.node {
		t.Errorf("node-id annotation = %q, want %q", id, "csi-"+e.node)
	}
	if got.Status.AttachError != nil {
		t.Errorf("attached VolumeAttachment still has attachError %+v", got.Status.AttachError)
	}
	if len(got.Status.AttachmentMetadata) == 0 {
		t.Error("status.attachmentMetadata is empty; the driver's publish context was dropped")
	}
	e.waitPV(pv.Name, "got the attacher finalizer", func(p *corev1.PersistentVolume) bool { return hasFinalizer(p.Finalizers, e.finalizer()) })

	// The PV cannot go while attached: its deletion waits for the detach.
	if err := e.cs.CoreV1().PersistentVolumes().Delete(e.ctx, pv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVA(va.Name, "deleted", func(v *storagev1.VolumeAttachment) bool { return v == nil })
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("PV %s still exists after its VolumeAttachment was deleted: the attacher finalizer was not removed", pv.Name)
	}

	want := []string{"ControllerPublishVolume:OK", "ControllerUnpublishVolume:OK"}
	if calls := e.calls(pv.Spec.CSI.VolumeHandle); !slices.Equal(calls, want) {
		t.Errorf("driver calls for the volume = %v, want %v", calls, want)
	}
}

// Without a CSINode for the node the attach cannot name the driver's node: the error lands in
// status.attachError and an event, and the attach succeeds on a retry once the node plugin
// registers.
func TestAttachErrorThenRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	pv := e.volume()
	va := e.attachment(pv)

	failed := e.waitVA(va.Name, "reported an attach error", func(v *storagev1.VolumeAttachment) bool {
		return v != nil && v.Status.AttachError != nil
	})
	if msg := failed.Status.AttachError.Message; !strings.Contains(msg, "CSINode "+e.node) || !strings.Contains(msg, e.name) {
		t.Errorf("attachError %q does not say which CSINode and driver are missing", msg)
	}
	if failed.Status.Attached {
		t.Error("VolumeAttachment marked attached despite the error")
	}
	e.waitEvent(va.Name, "AttachFailed")

	e.registerNode()
	got := e.waitVA(va.Name, "attached after the node registered", func(v *storagev1.VolumeAttachment) bool { return v != nil && v.Status.Attached })
	if got.Status.AttachError != nil {
		t.Errorf("attachError %+v not cleared after a successful attach", got.Status.AttachError)
	}
	if calls := e.calls(pv.Spec.CSI.VolumeHandle); len(calls) != 1 || calls[0] != "ControllerPublishVolume:OK" {
		t.Errorf("driver calls = %v, want exactly one successful ControllerPublishVolume", calls)
	}
}

// A driver without PUBLISH_UNPUBLISH_VOLUME gets upstream's trivial handling: attached without
// any call, no finalizer to hold the objects, and no reconcile (it lacks
// LIST_VOLUMES_PUBLISHED_NODES too), however short --reconcile-sync is.
func TestDriverWithoutControllerPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "--reconcile-sync", "200ms")
	pv := e.volume()
	va := e.attachment(pv)
	got := e.waitVA(va.Name, "attached", func(v *storagev1.VolumeAttachment) bool { return v != nil && v.Status.Attached })
	if hasFinalizer(got.Finalizers, e.finalizer()) {
		t.Errorf("trivially attached VolumeAttachment got finalizer %s", e.finalizer())
	}
	if calls := e.calls(pv.Spec.CSI.VolumeHandle); len(calls) != 0 {
		t.Errorf("driver without ControllerPublish was called: %v", calls)
	}
	if err := e.cs.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVA(va.Name, "deleted", func(v *storagev1.VolumeAttachment) bool { return v == nil })
	if n := e.count("ListVolumes"); n != 0 {
		t.Errorf("attacher made %d ListVolumes calls to a driver without LIST_VOLUMES_PUBLISHED_NODES", n)
	}
}
