// Package contentwrite holds the writes the snapshot roles make to a VolumeSnapshotContent and to a
// VolumeGroupSnapshotContent alike. Upstream's snapshot-controller and csi-snapshotter handle
// the two kinds with parallel code; the objects share their metadata rules, so one generic
// function serves both kinds, over the kind's write.Writer, which reports a refused write.
package contentwrite

import (
	"context"
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// Annotate sets the annotation key to "yes" (on) or removes it (the being-created and
// being-deleted marks) through w, and returns the stored content; on an error, the copy it
// sent, whose mark the create protocol takes as possibly stored.
func Annotate[T write.Object[T]](ctx context.Context, w write.Writer[T], obj T, key string, on bool, opts ...write.Option) (T, error) {
	mark := func(c T) bool {
		ann := c.GetAnnotations()
		if _, has := ann[key]; (on && ann[key] == "yes") || (!on && !has) {
			return false
		}
		if on {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[key] = "yes"
		} else {
			delete(ann, key)
		}
		c.SetAnnotations(ann)
		return true
	}
	out, err := w.Mutate(ctx, obj, mark, opts...)
	if err != nil {
		sent := obj.DeepCopy()
		mark(sent)
		return sent, err
	}
	return out, nil
}

// Deleter is the delete of a typed content client; package write has no delete.
type Deleter interface {
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Delete deletes obj with cl if the stored content is still the one of obj's UID, and
// reports a refusal on obj as w reports its writes. A content gone already is no error.
func Delete[T write.Object[T]](ctx context.Context, w write.Writer[T], cl Deleter, obj T) error {
	uid := obj.GetUID()
	err := cl.Delete(ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return controller.WriteFailed(ctx, w.Recorder, obj, "delete", w.Resource, err)
}

// PatchStatus merge-patches the content's status subresource with st through w and returns
// the stored content; on an error, obj.
func PatchStatus[T write.Object[T]](ctx context.Context, w write.Writer[T], obj T, st map[string]any, opts ...write.Option) (T, error) {
	return patchStatus(ctx, w, obj, map[string]any{"status": st}, opts)
}

// patchStatus merge-patches the status subresource with patch and returns the stored
// content; on an error, obj.
func patchStatus[T write.Object[T]](ctx context.Context, w write.Writer[T], obj T, patch map[string]any, opts []write.Option) (T, error) {
	data, err := json.Marshal(patch)
	if err != nil {
		return obj, err
	}
	return w.SendStatusPatch(ctx, obj, types.MergePatchType, data, opts...)
}

// SetError records msg in the content's status.error, with readyToUse false, unless current
// (the message stored now) is msg already. The patch holds obj's resourceVersion, as
// upstream's Update does: written from an outdated copy (an informer behind a write that
// made the content ready), it fails with a conflict instead of turning a ready content back.
func SetError[T write.Object[T]](ctx context.Context, w write.Writer[T], obj T, current *string, msg string, opts ...write.Option) (T, error) {
	if current != nil && *current == msg {
		return obj, nil
	}
	return patchStatus(ctx, w, obj, map[string]any{
		"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion()},
		"status": map[string]any{
			"readyToUse": false,
			"error":      map[string]any{"time": metav1.Now(), "message": msg},
		},
	}, opts)
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
