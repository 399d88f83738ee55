package attacher

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func (e *testEnv) va(name string) *storagev1.VolumeAttachment {
	e.t.Helper()
	va, err := e.cs.StorageV1().VolumeAttachments().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return va
}

// external-attacher's role grants only patch on volumeattachments, their status and
// persistentvolumes: a whole attach and detach must use nothing else. Each sync's requests
// are checked in order.
func TestAttachAndDetachOnlyPatch(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	e := newSyncEnv(t, drv, Config{}, attachment("vol-a"))
	if err := e.attach("va-vol-a"); err != nil {
		t.Fatal(err)
	}
	e.ExpectActions("patch persistentvolumes", "patch volumeattachments", "patch volumeattachments/status")
	va := e.va("va-vol-a")
	if !va.Status.Attached {
		t.Fatal("va-vol-a is not attached after its sync")
	}
	if va.Annotations[nodeIDAnnotation] != testNodeID || !slices.Contains(va.Finalizers, Finalizer(testDriver)) {
		t.Fatalf("VolumeAttachment lacks the node ID or the finalizer: %v %v", va.Annotations, va.Finalizers)
	}
	if va.Status.AttachmentMetadata["node"] != testNodeID {
		t.Errorf("attachmentMetadata = %v", va.Status.AttachmentMetadata)
	}
	// Attached and in the cache: a second sync does nothing.
	if err := e.attach("va-vol-a"); err != nil {
		t.Fatal(err)
	}
	e.ExpectActions()

	e.markDeleted("va-vol-a")
	if err := e.detach("va-vol-a"); err != nil {
		t.Fatal(err)
	}
	e.ExpectActions("patch volumeattachments")
	if f := e.va("va-vol-a").Finalizers; len(f) != 0 {
		t.Fatalf("finalizers %v after the detach", f)
	}
	// The API server deletes an object whose last finalizer is gone; the fake does not.
	if err := e.Client.Tracker().Delete(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "", "va-vol-a"); err != nil {
		t.Fatal(err)
	}
	if err := e.pv("pv-vol-a"); err != nil {
		t.Fatal(err)
	}
	e.ExpectActions("patch persistentvolumes")
	pv, err := e.Client.CoreV1().PersistentVolumes().Get(e.Ctx, "pv-vol-a", metav1.GetOptions{})
	if err != nil || len(pv.Finalizers) != 0 {
		t.Fatalf("PV finalizer not removed: %v, %v", pv, err)
	}
	e.ExpectEvents()
}

// A write the API refuses (403 under a role without the verb) is reported with a Warning
// event on the VolumeAttachment and retried with backoff: the sync fails.
func TestRefusedWriteWarns(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	e := newSyncEnv(t, drv, Config{}, attachment("vol-a"))
	e.Client.PrependReactor("patch", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments/status"}, "va-vol-a", fmt.Errorf("RBAC: patch not allowed"))
	})
	for try := 1; try <= 2; try++ {
		if err := e.attach("va-vol-a"); err == nil {
			t.Fatalf("sync %d with a refused status write succeeded", try)
		}
		evs := e.Events()
		if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+reasonWriteFailed+" ") || !strings.Contains(evs[0], "forbidden") || !strings.Contains(evs[0], "attached") {
			t.Errorf("events %q, want one WriteFailed naming the refused write and the cause", evs)
		}
		if got := drv.publishCount("vol-a"); got != try {
			t.Errorf("%d ControllerPublishVolume calls after %d syncs, want one a sync", got, try)
		}
	}
}

// Like external-attacher v4.10+, attachError.errorCode is the gRPC code of the driver's
// error; an error that never reached the driver has none.
func TestAttachErrorCode(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	drv.failNextPublishes(1000)
	other := attachment("vol-a")
	other.Name, other.Spec.NodeName = "va-other", "node-without-csinode"
	e := newSyncEnv(t, drv, Config{}, attachment("vol-a"), other)
	if err := e.attach("va-vol-a"); err == nil {
		t.Fatal("the sync of a failed publish succeeded")
	}
	if e.va("va-vol-a").Status.AttachError == nil {
		t.Fatal("no attachError on va-vol-a")
	}
	if got := e.va("va-vol-a").Status.AttachError.ErrorCode; got == nil || *got != 14 {
		t.Errorf("errorCode = %v, want 14 (Unavailable)", ptr.Deref(got, -1))
	}
	e.ExpectEvents("Warning " + reasonAttachFailed)
	if err := e.attach("va-other"); err == nil {
		t.Fatal("the sync of an attachment to a node without CSINode succeeded")
	}
	if e.va("va-other").Status.AttachError == nil {
		t.Fatal("no attachError on va-other")
	}
	if got := e.va("va-other").Status.AttachError.ErrorCode; got != nil {
		t.Errorf("errorCode = %d for an error that never reached the driver, want none", *got)
	}
}

// detachError carries errorCode too (external-attacher writes it for attachError only): a
// failed ControllerUnpublishVolume records its gRPC code, and the detach finishes once the
// driver succeeds.
func TestDetachErrorCode(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	e := newSyncEnv(t, drv, Config{}, attachment("vol-a"))
	if err := e.attach("va-vol-a"); err != nil || !e.va("va-vol-a").Status.Attached {
		t.Fatalf("attach: %v, attached %v", err, e.va("va-vol-a").Status.Attached)
	}
	drv.failNextUnpublishes(1000)
	e.markDeleted("va-vol-a")
	if err := e.detach("va-vol-a"); err == nil {
		t.Fatal("the sync of a failed unpublish succeeded")
	}
	de := e.va("va-vol-a").Status.DetachError
	if de == nil {
		t.Fatal("no detachError on va-vol-a")
	}
	if got := de.ErrorCode; got == nil || *got != int32(codes.FailedPrecondition) {
		t.Errorf("detachError.errorCode = %v, want %d (FailedPrecondition)", ptr.Deref(got, -1), codes.FailedPrecondition)
	}
	if !strings.Contains(de.Message, "still in use") {
		t.Errorf("detachError.message = %q, want the driver's error", de.Message)
	}
	e.ExpectEvents("Warning " + reasonDetachFailed)
	drv.failNextUnpublishes(0)
	if err := e.detach("va-vol-a"); err != nil {
		t.Fatal(err)
	}
	if f := e.va("va-vol-a").Finalizers; len(f) != 0 {
		t.Errorf("finalizers %v after the driver succeeded", f)
	}
	if drv.isPublished("vol-a", testNodeID) {
		t.Error("vol-a still published on the node")
	}
}
