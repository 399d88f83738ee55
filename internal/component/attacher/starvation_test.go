package attacher

import (
	"fmt"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/queuetest"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// attachedVA is the VolumeAttachment of volume as the attacher leaves it once attached:
// finalizer, node ID and status.attached; deleting adds the deletionTimestamp the
// attach/detach controller's delete leaves while the finalizer holds it.
func attachedVA(volume string, deleting bool) *storagev1.VolumeAttachment {
	va := attachment(volume)
	va.Finalizers = []string{Finalizer(testDriver)}
	va.Annotations = map[string]string{nodeIDAnnotation: testNodeID}
	va.Status.Attached = true
	if deleting {
		now := metav1.Now()
		va.DeletionTimestamp = &now
	}
	return va
}

// A burst of 200 detaches, every one held in ControllerUnpublishVolume as a slow backend
// holds them, does not delay an attach, and the other way round. The bound is structural:
// the lone operation completes while all --worker-threads calls of the burst are still in
// the driver and none has returned, so it waited for no call of the burst at all (behind
// external-attacher's single queue it would wait for about 200 / --worker-threads of them).
// The burst's backlog is visible meanwhile: workqueue_depth of its queue counts the keys no
// worker has taken, and workqueue_longest_waiting_item_seconds is above zero. An
// informer-level test on purpose: it is about the queues and their workers.
func TestNeitherOperationStarvesTheOther(t *testing.T) {
	const burst = 200
	for _, detaches := range []bool{true, false} {
		name, burstQueue := "detach burst, one attach", "volumeattachments-detach"
		if !detaches {
			name, burstQueue = "attach burst, one detach", "volumeattachments-attach"
		}
		t.Run(name, func(t *testing.T) {
			var vols []string
			var objs []runtime.Object
			for i := range burst {
				v := fmt.Sprintf("vol-%03d", i)
				vols = append(vols, v)
				if detaches {
					objs = append(objs, attachedVA(v, true))
				} else {
					objs = append(objs, attachment(v))
				}
			}
			drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, append(vols, "vol-lone")...)
			hold := make(chan struct{})
			if detaches {
				drv.holdUnpublish = hold
			} else {
				drv.holdPublish = hold
				objs = append(objs, attachedVA("vol-lone", false))
			}
			reg := prometheus.NewRegistry()
			e := startController(t, drv, Config{ControllerConfig: sidecar.ControllerConfig{QueueMetrics: controller.NewQueueMetrics(reg)}}, objs...)
			workers := e.c.cfg.Workers
			inDriver := func() (held, done int) {
				c := drv.calls.get()
				if detaches {
					return c.unpublishing, c.unpublishDone
				}
				return c.publishing, c.publishDone
			}
			e.waitFor("every worker of the burst held in the driver", func() bool { held, _ := inDriver(); return held == workers })

			if detaches {
				if _, err := e.cs.StorageV1().VolumeAttachments().Create(e.ctx, attachment("vol-lone"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				e.waitFor("the lone attach", func() bool { return e.attached("vol-lone") })
			} else {
				va := e.va("va-vol-lone")
				now := metav1.Now()
				va.DeletionTimestamp = &now
				if err := e.cs.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), va, ""); err != nil {
					t.Fatal(err)
				}
				e.waitFor("the lone detach", func() bool { return !slices.Contains(e.va("va-vol-lone").Finalizers, Finalizer(testDriver)) })
			}
			held, done := inDriver()
			if held != workers || done != 0 {
				t.Errorf("when the lone operation completed, %d calls of the burst were held and %d had returned; want %d and 0", held, done, workers)
			}
			// Read before the burst is released, so the figures are the backlog's.
			depth := queuetest.Metric(t, reg, "workqueue_depth", burstQueue).GetGauge().GetValue()
			oldest := queuetest.Metric(t, reg, "workqueue_longest_waiting_item_seconds", burstQueue).GetGauge().GetValue()
			if depth < burst-float64(workers) || oldest <= 0 {
				t.Errorf("%s: workqueue_depth %v (want at least %d) and workqueue_longest_waiting_item_seconds %v (want above 0) while the burst is held",
					burstQueue, depth, burst-workers, oldest)
			}

			close(hold)
			for _, v := range vols {
				e.waitFor(v+" done after the burst's release", func() bool {
					va := e.va("va-" + v)
					if detaches {
						return len(va.Finalizers) == 0
					}
					return va.Status.Attached
				})
			}
		})
	}
}

// A VolumeAttachment deleted while its ControllerPublishVolume is in flight is queued for
// detach at once, yet ControllerUnpublishVolume starts only after the publish returned, as
// behind external-attacher's single queue: the detach worker that takes it meanwhile puts it
// down and is free for other work. An informer-level test on purpose: it is about two
// workers of two queues meeting on one key.
func TestDeletedWhileAttachingWaitsForThePublish(t *testing.T) {
	drv := newPublishDriver([]csi.ControllerServiceCapability_RPC_Type{capPublish}, "vol-a")
	hold := make(chan struct{})
	drv.holdPublish = hold
	reg := prometheus.NewRegistry()
	e := startController(t, drv, Config{ControllerConfig: sidecar.ControllerConfig{QueueMetrics: controller.NewQueueMetrics(reg)}}, attachment("vol-a"))
	e.waitFor("ControllerPublishVolume in flight", func() bool { return drv.calls.get().publishing == 1 })
	va := e.va("va-vol-a")
	now := metav1.Now()
	va.DeletionTimestamp = &now
	if err := e.cs.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), va, ""); err != nil {
		t.Fatal(err)
	}
	e.waitFor("a detach worker took va-vol-a and put it down", func() bool {
		m := queuetest.Metric(t, reg, "workqueue_work_duration_seconds", "volumeattachments-detach")
		return m != nil && m.GetHistogram().GetSampleCount() >= 1
	})
	if c := drv.calls.get(); c.unpublishing+c.unpublishDone != 0 {
		t.Fatalf("ControllerUnpublishVolume called while ControllerPublishVolume was in flight: %q", c.events)
	}
	close(hold)
	e.waitFor("finalizer removed", func() bool { return len(e.va("va-vol-a").Finalizers) == 0 })
	// The first unpublish follows the publish's return. A second one may follow it, as with
	// upstream: a sync that runs again before the cache shows the finalizer gone detaches
	// again, which ControllerUnpublishVolume's idempotence allows.
	got := drv.calls.get().events
	if len(got) < 3 || !slices.Equal(got[:3], []string{"publish vol-a", "published vol-a", "unpublish vol-a"}) {
		t.Errorf("driver calls %q, want the publish to return before the first unpublish", got)
	}
	for _, ev := range got[min(3, len(got)):] {
		if ev != "unpublish vol-a" {
			t.Errorf("driver calls %q: %q after the detach", got, ev)
		}
	}
}
