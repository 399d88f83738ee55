package reclaim

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/kubevol/kubevol/internal/component/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller/controllertest"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

const driverName = "fake.csi.kubevol.io"

func releasedPV(name, handle string, policy corev1.PersistentVolumeReclaimPolicy) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{pvspec.Finalizer},
			Annotations: map[string]string{pvspec.AnnProvisionedBy: driverName, pvspec.AnnDeletionSecretName: "", pvspec.AnnDeletionSecretNamespace: ""}},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: policy,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased},
	}
}

// A Released PV is deleted only once no VolumeAttachment names it; Retain drops the
// finalizer and keeps the volume. An informer-level test on purpose: the VolumeAttachment's
// delete handler is what queues the PV again after the detach, and only running informers
// and workers show that the deletion follows without anything else happening to the PV.
// TestSyncDeletesAfterDetachAndHonoursRetain checks each sync's outcome.
func TestDeleteWaitsForDetachAndHonoursRetain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pvName := "pvc-1"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"}, Spec: storagev1.VolumeAttachmentSpec{
		Attacher: driverName, NodeName: "n", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}}
	cs := fake.NewClientset(releasedPV(pvName, "h1", corev1.PersistentVolumeReclaimDelete), releasedPV("pvc-2", "h2", corev1.PersistentVolumeReclaimRetain), va)
	drv := csitest.Start(t, &csitest.Driver{Name: driverName, ControllerCaps: []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}})
	conn, err := csiclient.Dial(csiclient.Config{Address: drv.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	recorder := record.NewFakeRecorder(100)
	factory := informers.NewSharedInformerFactory(cs, 0)
	c, err := New(Config{ControllerConfig: sidecar.ControllerConfig{Client: cs, CSI: conn, DriverName: driverName,
		RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: 50 * time.Millisecond},
		Recorder: recorder, Metrics: metrics.New(nil, nil),
		Volumes: factory.Core().V1().PersistentVolumes(), Attachments: factory.Storage().V1().VolumeAttachments()})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx, 2)

	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	// Drain the events: a full FakeRecorder blocks the workers.
	var attachedEvents atomic.Int32
	go func() {
		for ev := range recorder.Events {
			if strings.Contains(ev, "still attached") {
				attachedEvents.Add(1)
			}
		}
	}()
	poll("the still-attached event", func() bool { return attachedEvents.Load() > 0 })
	if n := drv.Calls("DeleteVolume"); n != 0 {
		t.Fatalf("DeleteVolume called %d times while attached", n)
	}
	if err := cs.StorageV1().VolumeAttachments().Delete(ctx, "va", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("DeleteVolume after the detach", func() bool { return drv.Calls("DeleteVolume") == 1 })
	poll("the PV to go", func() bool {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err != nil
	})
	poll("Retain to drop the finalizer", func() bool {
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, "pvc-2", metav1.GetOptions{})
		return err == nil && len(pv.Finalizers) == 0
	})
	if n := drv.Calls("DeleteVolume"); n != 1 {
		t.Fatalf("DeleteVolume called %d times; Retain must not delete", n)
	}
}

// newSyncer is a volume controller on f's informers and recorder, whose syncs the test
// calls itself.
func newSyncer(t *testing.T, f *controllertest.Fixture, drv *csitest.Driver) *Controller {
	conn, err := csiclient.Dial(csiclient.Config{Address: drv.Address})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := New(Config{ControllerConfig: sidecar.ControllerConfig{Client: f.Client, CSI: conn, DriverName: driverName},
		Recorder: f.Recorder, Metrics: metrics.New(nil, nil),
		Volumes: f.Informers.Core().V1().PersistentVolumes(), Attachments: f.Informers.Storage().V1().VolumeAttachments()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Each sync of TestDeleteWaitsForDetachAndHonoursRetain on its own: while a VolumeAttachment
// names the Released PV the sync fails with an event and no DeleteVolume; once it is gone
// the sync deletes the volume, the PV, and then its finalizer; Retain only drops the
// finalizer.
func TestSyncDeletesAfterDetachAndHonoursRetain(t *testing.T) {
	pvName := "pvc-1"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"}, Spec: storagev1.VolumeAttachmentSpec{
		Attacher: driverName, NodeName: "n", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}}
	f := controllertest.New(t, releasedPV(pvName, "h1", corev1.PersistentVolumeReclaimDelete), releasedPV("pvc-2", "h2", corev1.PersistentVolumeReclaimRetain), va)
	drv := csitest.Start(t, &csitest.Driver{Name: driverName, ControllerCaps: []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}})
	c := newSyncer(t, f, drv)

	if err := controllertest.Sync(f, c.sync, pvName); err == nil || !strings.Contains(err.Error(), "still attached") {
		t.Fatalf("sync while attached: %v, want still attached", err)
	}
	f.ExpectActions()
	f.ExpectEvents("Warning " + ReasonVolumeFailedDelete + " persistentvolume pvc-1 is still attached")
	if n := drv.Calls("DeleteVolume"); n != 0 {
		t.Fatalf("DeleteVolume called %d times while attached", n)
	}

	if err := f.Client.StorageV1().VolumeAttachments().Delete(f.Ctx, "va", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := controllertest.Sync(f, c.sync, pvName); err != nil {
		t.Fatal(err)
	}
	// The fake deletes at once, so the finalizer's removal finds no PV, which is success.
	f.ExpectActions("delete persistentvolumes", "patch persistentvolumes")
	if n := drv.Calls("DeleteVolume"); n != 1 {
		t.Fatalf("DeleteVolume called %d times after the detach, want 1", n)
	}
	if _, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, pvName, metav1.GetOptions{}); err == nil {
		t.Fatal("the Released PV is still there")
	}

	if err := controllertest.Sync(f, c.sync, "pvc-2"); err != nil {
		t.Fatal(err)
	}
	f.ExpectActions("patch persistentvolumes")
	pv, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, "pvc-2", metav1.GetOptions{})
	if err != nil || len(pv.Finalizers) != 0 {
		t.Fatalf("Retain PV: %v, %v; want it kept without the finalizer", pv, err)
	}
	if n := drv.Calls("DeleteVolume"); n != 1 {
		t.Fatalf("DeleteVolume called %d times; Retain must not delete", n)
	}
	f.ExpectEvents()
}
