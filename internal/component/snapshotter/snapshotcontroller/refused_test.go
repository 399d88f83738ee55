package snapshotcontroller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// A content write the API server refuses (here the bound finalizer, an update upstream's
// role grants) is a Warning event on the content naming the write, on every retry.
func TestRefusedWriteWarns(t *testing.T) {
	handle, name, cls := "h", "static", "gold"
	content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: "s", Namespace: ns, UID: "uid-s"}, Driver: driver,
			DeletionPolicy: snapv1.VolumeSnapshotContentRetain, Source: snapv1.VolumeSnapshotContentSource{SnapshotHandle: &handle}}}
	vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns, UID: "uid-s"},
		Spec: snapv1.VolumeSnapshotSpec{VolumeSnapshotClassName: &cls, Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &name}}}
	f := start(t, nil, content, vs)
	f.snap.PrependReactor("update", "volumesnapshotcontents", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents"}, name, errors.New("RBAC: update not allowed"))
	})
	// A step per poll: the broadcaster posts the event on its own goroutine.
	var got string
	_ = wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		f.steps("s", 1)
		list, _ := f.core.CoreV1().Events("").List(f.ctx, metav1.ListOptions{})
		for _, ev := range list.Items {
			if ev.InvolvedObject.Name == name && ev.Reason == controller.ReasonWriteFailed {
				got = ev.Type + " " + ev.Message
			}
		}
		return got != "", nil
	})
	if !strings.HasPrefix(got, "Warning cannot update volumesnapshotcontents: ") || !strings.Contains(got, "forbidden") {
		t.Fatalf("event on the content %q, want a Warning naming the refused update and the cause", got)
	}
}
