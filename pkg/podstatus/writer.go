// Package podstatus writes what a volume manager observes about pods back to the API
// server. A Writer is a volumemanager.Observer:
//
//   - the pod condition kubevol.io/VolumesReady: True (reason VolumesMounted) once every
//     volume the pod's containers use is mounted, False (reason FailedMount, with the
//     reason in the message) while one cannot be set up;
//   - the end of a graceful deletion: once the volumes of a pod being deleted are torn
//     down, the pod is deleted with grace period 0 and a UID precondition, as the kubelet
//     does after its containers stopped. Pods are never deleted before their volumes are
//     down, and terminal pods that are not being deleted are left to the pod garbage
//     collector.
//
// Writes go through a rate-limited queue: only the latest wish per pod is written, and API
// errors are retried with per-pod backoff.
//
// A node that runs containers decides itself when a pod's deletion is complete; it would
// use the condition only, or its own Observer.
package podstatus

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

var _ volumemanager.Observer = (*Writer)(nil)

// VolumesReadyCondition is the pod condition with which a Writer reports whether every
// volume the pod's containers use is mounted.
const VolumesReadyCondition v1.PodConditionType = "kubevol.io/VolumesReady"

// Condition reasons.
const (
	ReasonVolumesMounted = "VolumesMounted"
	ReasonFailedMount    = "FailedMount"
)

// Writer is a volumemanager.Observer that writes the pods' condition and completes their
// deletion; Run does the writing.
type Writer struct {
	client kubernetes.Interface
	queue  *controller.Queue[types.UID]

	mu    sync.Mutex
	wants map[types.UID]podWish
}

type podWish struct {
	namespace, name string
	condition       *v1.PodCondition
	delete          bool
	// rejected, when set, is the reason the pod was rejected: phase Failed.
	rejected, rejectMessage string
}

// New returns a Writer that writes with client: pods/status patch and pods delete.
func New(client kubernetes.Interface) *Writer {
	return &Writer{
		client: client, wants: map[types.UID]podWish{},
		// Retries start soon: a status write that failed is usually a brief API outage.
		queue: controller.NewQueue[types.UID]("node_pod_status", controller.QueueConfig{RetryIntervalStart: 5 * time.Millisecond, RetryIntervalMax: time.Minute}),
	}
}

// VolumesReady implements volumemanager.Observer: the condition becomes True.
func (w *Writer) VolumesReady(pod *v1.Pod) {
	w.want(pod, func(p *podWish) {
		p.condition = &v1.PodCondition{Type: VolumesReadyCondition, Status: v1.ConditionTrue, Reason: ReasonVolumesMounted,
			Message: "all volumes are mounted"}
	})
}

// VolumesFailed implements volumemanager.Observer: the condition becomes False with
// message.
func (w *Writer) VolumesFailed(pod *v1.Pod, message string) {
	w.want(pod, func(p *podWish) {
		p.condition = &v1.PodCondition{Type: VolumesReadyCondition, Status: v1.ConditionFalse, Reason: ReasonFailedMount, Message: message}
	})
}

// VolumesTornDown implements volumemanager.Observer: it completes a graceful deletion with
// grace period 0 now that the volumes are down, as the kubelet does; terminal pods that are
// not being deleted are left alone.
func (w *Writer) VolumesTornDown(pod *v1.Pod) {
	if pod.DeletionTimestamp == nil {
		return
	}
	w.want(pod, func(p *podWish) { p.delete = true; p.condition = nil })
}

// RejectPod implements volumemanager.PodRejecter: the pod's phase becomes Failed with
// reason and "Pod was rejected: <message>", as the kubelet's pod rejection.
func (w *Writer) RejectPod(pod *v1.Pod, reason, message string) {
	w.want(pod, func(p *podWish) { p.rejected, p.rejectMessage = reason, "Pod was rejected: "+message })
}

func (w *Writer) want(pod *v1.Pod, f func(*podWish)) {
	w.mu.Lock()
	p := w.wants[pod.UID]
	p.namespace, p.name = pod.Namespace, pod.Name
	f(&p)
	w.wants[pod.UID] = p
	w.mu.Unlock()
	w.queue.Add(pod.UID)
}

// Run writes until ctx ends, with four workers.
func (w *Writer) Run(ctx context.Context) {
	r := controller.NewRunner("podstatus")
	controller.Handle(r, w.queue, 4, w.sync)
	_ = r.Run(ctx) // no source, so nothing to fail
}

// sync writes the latest wish for the pod; a failed write is retried with the pod's backoff
// unless a newer wish came meanwhile.
func (w *Writer) sync(ctx context.Context, uid types.UID) error {
	w.mu.Lock()
	p, ok := w.wants[uid]
	delete(w.wants, uid)
	w.mu.Unlock()
	if !ok {
		return nil
	}
	err := w.write(ctx, uid, p)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or another pod now has the name (UID precondition): nothing to do.
		return nil
	}
	klog.FromContext(ctx).Error(err, "Pod status update failed, retrying", "pod", klog.KRef(p.namespace, p.name))
	w.mu.Lock()
	if _, newer := w.wants[uid]; !newer {
		w.wants[uid] = p
	}
	w.mu.Unlock()
	return err
}

func (w *Writer) write(ctx context.Context, uid types.UID, p podWish) error {
	pods := w.client.CoreV1().Pods(p.namespace)
	if p.delete {
		grace := int64(0)
		return pods.Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	status := map[string]any{}
	if p.condition != nil {
		c := *p.condition
		c.LastTransitionTime = metav1.Now()
		status["conditions"] = []v1.PodCondition{c}
	}
	if p.rejected != "" {
		status["phase"], status["reason"], status["message"] = v1.PodFailed, p.rejected, p.rejectMessage
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   status,
	})
	if err != nil {
		return err
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: p.name, UID: uid}}
	_, err = write.Pods(w.client).SendStatusPatch(ctx, pod, types.StrategicMergePatchType, patch)
	return err
}
