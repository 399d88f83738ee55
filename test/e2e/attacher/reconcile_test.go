package attacher

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// The --reconcile-sync pass: a volume the driver unpublishes behind the attacher's back is
// published again while its VolumeAttachment stays attached, with a NotPublished event;
// the other attachment, still published, gets no further call. --max-entries 1 makes every
// pass page through the driver's two volumes.
func TestReconcileRepublishesLostAttachment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, "--reconcile-sync", "2s", "--max-entries", "1")
	e.registerNode()
	lost, kept := e.volume(), e.volume()
	vaLost, vaKept := e.attachment(lost), e.attachment(kept)
	attached := func(v *storagev1.VolumeAttachment) bool { return v != nil && v.Status.Attached }
	e.waitVA(vaKept.Name, "attached", attached)
	got := e.waitVA(vaLost.Name, "attached", attached)

	// Two whole passes after the attach, so the calls counted below are all the attach's.
	e.waitListVolumes(4)
	keptCalls := e.calls(kept.Spec.CSI.VolumeHandle)

	// Every change of the lost VolumeAttachment from here on, to prove it never turns
	// unattached: the node and the attach/detach controller must not see a detach.
	w, err := e.cs.StorageV1().VolumeAttachments().Watch(e.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", vaLost.Name).String(), ResourceVersion: got.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var unattached []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if va, ok := ev.Object.(*storagev1.VolumeAttachment); ok && !va.Status.Attached {
				unattached = append(unattached, string(ev.Type)+" at resourceVersion "+va.ResourceVersion)
			}
		}
	}()

	nodeID := "csi-" + e.node
	if _, err := e.drv.Controller.ControllerUnpublishVolume(e.ctx, &csi.ControllerUnpublishVolumeRequest{
		VolumeId: lost.Spec.CSI.VolumeHandle, NodeId: nodeID,
	}); err != nil {
		t.Fatalf("ControllerUnpublishVolume through the driver's socket: %v", err)
	}
	want := []string{"ControllerPublishVolume:OK", "ControllerUnpublishVolume:OK", "ControllerPublishVolume:OK"}
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(e.calls(lost.Spec.CSI.VolumeHandle), want), nil
	})
	if err != nil {
		t.Fatalf("driver calls for the unpublished volume = %v, want %v", e.calls(lost.Spec.CSI.VolumeHandle), want)
	}

	// Another whole pass: the republished volume is not published once more, the kept
	// one never was.
	e.waitListVolumes(4)
	if calls := e.calls(lost.Spec.CSI.VolumeHandle); !slices.Equal(calls, want) {
		t.Errorf("driver calls for the unpublished volume = %v, want %v", calls, want)
	}
	if calls := e.calls(kept.Spec.CSI.VolumeHandle); !slices.Equal(calls, keptCalls) {
		t.Errorf("driver calls for the still published volume = %v, want them unchanged from %v", calls, keptCalls)
	}
	w.Stop()
	<-watched
	if len(unattached) > 0 {
		t.Errorf("VolumeAttachment %s turned unattached: %v", vaLost.Name, unattached)
	}
	e.waitEvent(vaLost.Name, "NotPublished")
	// Last, as it is a call on the volume too.
	vol, err := e.drv.Controller.ControllerGetVolume(e.ctx, &csi.ControllerGetVolumeRequest{VolumeId: lost.Spec.CSI.VolumeHandle})
	if err != nil {
		t.Fatal(err)
	}
	if nodes := vol.GetStatus().GetPublishedNodeIds(); !slices.Contains(nodes, nodeID) {
		t.Errorf("driver reports the volume published to %v after the reconcile, want %s", nodes, nodeID)
	}
}

// waitListVolumes waits for n more ListVolumes calls from the attacher.
func (e *env) waitListVolumes(n int) {
	e.t.Helper()
	target := e.count("ListVolumes") + n
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return e.count("ListVolumes") >= target, nil
	})
	if err != nil {
		e.t.Fatalf("the attacher made %d of %d more ListVolumes calls", n-(target-e.count("ListVolumes")), n)
	}
}

// waitEvent waits for a Warning event with reason on the VolumeAttachment name.
func (e *env) waitEvent(name, reason string) {
	e.t.Helper()
	_, err := kubecheck.WaitForEvent(e.ctx, e.cs, metav1.NamespaceDefault, name, time.Minute, func(ev corev1.Event) bool {
		return ev.Reason == reason && ev.Type == corev1.EventTypeWarning
	})
	if err != nil {
		e.t.Errorf("no %s warning event on VolumeAttachment %s: %v", reason, name, err)
	}
}
