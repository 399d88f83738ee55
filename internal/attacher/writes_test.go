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
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// writes lists the attacher's write requests as "verb resource[/subresource]".
func (e *testEnv) writes() []string {
	var out []string
	for _, a := range e.cs.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		r := a.GetResource().Resource
		if a.GetSubresource() != "" {
			r += "/" + a.GetSubresource()
		}
		out = append(out, a.GetVerb()+" "+r)
	}
	return out
}

func (e *testEnv) va(name string) *storagev1.VolumeAttachment {
	e.t.Helper()
	va, err := e.cs.StorageV1().VolumeAttachments().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return va
}

// external-attacher's role grants only patch on volumeattachments, their status and
// persistentvolumes: a whole attach and detach must use nothing else.
func TestAttachAndDetachOnlyPatch(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	e := startController(t, drv, Config{}, attachment("vol-a"))
	e.waitFor("va-vol-a attached", func() bool { return e.attached("vol-a") })
	va := e.va("va-vol-a")
	if va.Annotations[nodeIDAnnotation] != testNodeID || !slices.Contains(va.Finalizers, Finalizer(testDriver)) {
		t.Fatalf("VolumeAttachment lacks the node ID or the finalizer: %v %v", va.Annotations, va.Finalizers)
	}
	if va.Status.AttachmentMetadata["node"] != testNodeID {
		t.Errorf("attachmentMetadata = %v", va.Status.AttachmentMetadata)
	}
	now := metav1.Now()
	va.DeletionTimestamp = &now
	if err := e.cs.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), va, ""); err != nil {
		t.Fatal(err)
	}
	e.waitFor("finalizer removed", func() bool { return len(e.va("va-vol-a").Finalizers) == 0 })
	// The API server deletes an object whose last finalizer is gone; the fake does not.
	if err := e.cs.Tracker().Delete(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "", "va-vol-a"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("PV finalizer removed", func() bool {
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, "pv-vol-a", metav1.GetOptions{})
		return err == nil && len(pv.Finalizers) == 0
	})
	want := map[string]bool{"patch volumeattachments": false, "patch volumeattachments/status": false, "patch persistentvolumes": false}
	for _, w := range e.writes() {
		if _, ok := want[w]; ok {
			want[w] = true
			continue
		}
		if !strings.HasSuffix(w, " events") {
			t.Errorf("write %q: upstream's role grants only patch", w)
		}
	}
	for w, seen := range want {
		if !seen {
			t.Errorf("no %q request", w)
		}
	}
}

// A write the API refuses (403 under a role without the verb) is reported with a Warning
// event on the VolumeAttachment and retried with backoff.
func TestRefusedWriteWarns(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	e := startControllerWith(t, drv, Config{}, func(cs *fake.Clientset) {
		cs.PrependReactor("patch", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "status" {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments/status"}, "va-vol-a", fmt.Errorf("RBAC: patch not allowed"))
		})
	}, attachment("vol-a"))
	e.waitFor("a WriteFailed event", func() bool { return len(e.events(reasonWriteFailed)) > 0 })
	ev := e.events(reasonWriteFailed)[0]
	if !strings.HasPrefix(ev, "va-vol-a: ") || !strings.Contains(ev, "forbidden") || !strings.Contains(ev, "attached") {
		t.Errorf("event %q, want one on va-vol-a naming the refused write and the cause", ev)
	}
	e.waitFor("a retry", func() bool { return drv.publishCount("vol-a") >= 2 })
}

// Like external-attacher v4.10+, attachError.errorCode is the gRPC code of the driver's
// error; an error that never reached the driver has none.
func TestAttachErrorCode(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	drv.failNextPublishes(1000)
	other := attachment("vol-a")
	other.Name, other.Spec.NodeName = "va-other", "node-without-csinode"
	e := startController(t, drv, Config{}, attachment("vol-a"), other)
	e.waitFor("attachError of va-vol-a", func() bool { return e.va("va-vol-a").Status.AttachError != nil })
	if got := e.va("va-vol-a").Status.AttachError.ErrorCode; got == nil || *got != 14 {
		t.Errorf("errorCode = %v, want 14 (Unavailable)", ptr.Deref(got, -1))
	}
	e.waitFor("attachError of va-other", func() bool { return e.va("va-other").Status.AttachError != nil })
	if got := e.va("va-other").Status.AttachError.ErrorCode; got != nil {
		t.Errorf("errorCode = %d for an error that never reached the driver, want none", *got)
	}
}

// detachError carries errorCode too (external-attacher writes it for attachError only): a
// failed ControllerUnpublishVolume records its gRPC code, and the detach finishes once the
// driver succeeds.
func TestDetachErrorCode(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	e := startController(t, drv, Config{}, attachment("vol-a"))
	e.waitFor("va-vol-a attached", func() bool { return e.attached("vol-a") })
	drv.failNextUnpublishes(1000)
	va := e.va("va-vol-a")
	now := metav1.Now()
	va.DeletionTimestamp = &now
	if err := e.cs.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), va, ""); err != nil {
		t.Fatal(err)
	}
	e.waitFor("detachError of va-vol-a", func() bool { return e.va("va-vol-a").Status.DetachError != nil })
	de := e.va("va-vol-a").Status.DetachError
	if got := de.ErrorCode; got == nil || *got != int32(codes.FailedPrecondition) {
		t.Errorf("detachError.errorCode = %v, want %d (FailedPrecondition)", ptr.Deref(got, -1), codes.FailedPrecondition)
	}
	if !strings.Contains(de.Message, "still in use") {
		t.Errorf("detachError.message = %q, want the driver's error", de.Message)
	}
	// The recorder posts events on its own goroutine: the status may be seen first.
	e.waitFor("a DetachFailed event", func() bool { return len(e.events(reasonDetachFailed)) > 0 })
	drv.failNextUnpublishes(0)
	e.waitFor("finalizer removed after the driver succeeds", func() bool { return len(e.va("va-vol-a").Finalizers) == 0 })
	if drv.isPublished("vol-a", testNodeID) {
		t.Error("vol-a still published on the node")
	}
}
