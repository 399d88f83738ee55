// Package contentwrite holds the writes the snapshot roles make to a VolumeSnapshotContent and to a
// VolumeGroupSnapshotContent alike. Upstream's snapshot-controller and csi-snapshotter handle
// the two kinds with parallel code; the objects share their metadata rules and the typed
// clients share their method shapes, so one generic function serves both kinds.
package contentwrite

import (
	"context"
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// Object is a pointer to a (group) snapshot content.
type Object[T any] interface {
	metav1.Object
	DeepCopy() T
}

// Client is the part of a typed content client the roles use.
type Client[T any] interface {
	controller.Getter[T]
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Reporting returns cl with every write the API server refuses (controller.Refused)
// reported on the content on: one default-level line naming the write and a Warning event,
// as often as the queue's backoff retries it. resource is the plural name the writes go
// to, e.g. "volumesnapshotcontents".
func Reporting[T any](cl Client[T], rec record.EventRecorder, on runtime.Object, resource string) Client[T] {
	return reporting[T]{Client: cl, rec: rec, on: on, resource: resource}
}

type reporting[T any] struct {
	Client[T]
	rec      record.EventRecorder
	on       runtime.Object
	resource string
}

func (r reporting[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out, err := r.Client.Update(ctx, obj, opts)
	return out, controller.WriteFailed(ctx, r.rec, r.on, "update", r.resource, err)
}

func (r reporting[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out, err := r.Client.Patch(ctx, name, pt, data, opts, subresources...)
	resource := r.resource
	for _, sub := range subresources {
		resource += "/" + sub
	}
	return out, controller.WriteFailed(ctx, r.rec, r.on, "patch", resource, err)
}

func (r reporting[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return controller.WriteFailed(ctx, r.rec, r.on, "delete", r.resource, r.Client.Delete(ctx, name, opts))
}

// Annotate sets the annotation key to "yes" (on) or removes it (the being-created and
// being-deleted marks), and returns the stored content; on an error, the copy it sent.
func Annotate[T Object[T]](ctx context.Context, cl Client[T], obj T, key string, on bool) (T, error) {
	obj = obj.DeepCopy()
	ann := obj.GetAnnotations()
	if on {
		if ann == nil {
			ann = map[string]string{}
		}
		ann[key] = "yes"
	} else {
		delete(ann, key)
	}
	obj.SetAnnotations(ann)
	out, err := cl.Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return obj, err
	}
	return out, nil
}

// AddFinalizer adds f to a copy of obj and returns the stored content.
func AddFinalizer[T Object[T]](ctx context.Context, cl Client[T], obj T, f string) (T, error) {
	obj = obj.DeepCopy()
	write.SetFinalizers(obj, true, f)
	return cl.Update(ctx, obj, metav1.UpdateOptions{})
}

// RemoveFinalizer removes f from obj (in place) and stores it. A content gone meanwhile is
// no error.
func RemoveFinalizer[T Object[T]](ctx context.Context, cl Client[T], obj T, f string) error {
	write.SetFinalizers(obj, false, f)
	_, err := cl.Update(ctx, obj, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Delete deletes obj if the stored content is still the one of obj's UID. A content gone
// already is no error.
func Delete[T Object[T]](ctx context.Context, cl Client[T], obj T) error {
	uid := obj.GetUID()
	err := cl.Delete(ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// PatchStatus merge-patches the content's status subresource with st and returns the stored
// content; on an error, obj.
func PatchStatus[T Object[T]](ctx context.Context, cl Client[T], obj T, st map[string]any) (T, error) {
	return patchStatus(ctx, cl, obj, map[string]any{"status": st})
}

// patchStatus merge-patches the status subresource with patch and returns the stored
// content; on an error, obj.
func patchStatus[T Object[T]](ctx context.Context, cl Client[T], obj T, patch map[string]any) (T, error) {
	data, err := json.Marshal(patch)
	if err != nil {
		return obj, err
	}
	out, err := cl.Patch(ctx, obj.GetName(), types.MergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		return obj, err
	}
	return out, nil
}

// SetError records msg in the content's status.error, with readyToUse false, unless current
// (the message stored now) is msg already. The patch holds obj's resourceVersion, as
// upstream's Update does: written from an outdated copy (an informer behind a write that
// made the content ready), it fails with a conflict instead of turning a ready content back.
func SetError[T Object[T]](ctx context.Context, cl Client[T], obj T, current *string, msg string) (T, error) {
	if current != nil && *current == msg {
		return obj, nil
	}
	return patchStatus(ctx, cl, obj, map[string]any{
		"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion()},
		"status": map[string]any{
			"readyToUse": false,
			"error":      map[string]any{"time": metav1.Now(), "message": msg},
		},
	})
}

// Filter is what the csi-snapshotter's update filter needs to know of a content kind.
type Filter[T metav1.Object] struct {
	// BoundFinalizer and BeingCreated are the kind's bound finalizer and being-created
	// annotation.
	BoundFinalizer, BeingCreated string
	// Ready reports status.readyToUse; Spec returns the spec.
	Ready func(T) bool
	Spec  func(T) any
	// FinalizersWhileDeleting passes a change of the finalizers of a content being deleted.
	FinalizersWhileDeleting bool
}

// Changed filters out the updates the csi-snapshotter causes itself (status, the
// being-created annotation, finalizers, managed fields), as upstream does to avoid a hot
// loop on its own writes, unless the content's readiness changed or it gained the bound
// finalizer, which may unblock a create. Resyncs (same resourceVersion) always pass.
func (f Filter[T]) Changed(old, cur T) bool {
	if old.GetResourceVersion() == cur.GetResourceVersion() {
		return true
	}
	if !snapshotter.HasFinalizer(old, f.BoundFinalizer) && snapshotter.HasFinalizer(cur, f.BoundFinalizer) {
		return true
	}
	if f.Ready(old) != f.Ready(cur) {
		return true // turned ready, which may unblock a create, or not ready, to be retried
	}
	if !equality.Semantic.DeepEqual(f.Spec(old), f.Spec(cur)) || !equality.Semantic.DeepEqual(old.GetDeletionTimestamp(), cur.GetDeletionTimestamp()) {
		return true
	}
	if f.FinalizersWhileDeleting && cur.GetDeletionTimestamp() != nil && !slices.Equal(old.GetFinalizers(), cur.GetFinalizers()) {
		return true
	}
	return !equalExcept(old.GetAnnotations(), cur.GetAnnotations(), f.BeingCreated)
}

// Handler queues a content on its add and on each update Changed passes; a deleted content
// leaves the queue's backoff.
func (f Filter[T]) Handler(queue *controller.Queue[string]) cache.ResourceEventHandlerFuncs {
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(T)
			cur, ok2 := newObj.(T)
			if ok1 && ok2 && !f.Changed(old, cur) {
				return
			}
			enqueue(newObj)
		},
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				queue.Forget(key)
			}
		},
	}
}

func equalExcept(a, b map[string]string, skip string) bool {
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if k != skip && a[k] != b[k] {
				return false
			}
		}
	}
	return true
}
