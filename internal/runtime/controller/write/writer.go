package write

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// Verb is the verb a role grants on a resource, and the one its writes use.
type Verb string

const (
	Patch  Verb = "patch"
	Update Verb = "update"
)

// Object is a pointer to an API object.
type Object[T any] interface {
	runtime.Object
	metav1.Object
	DeepCopy() T
}

// Client is the part of a typed client (of one namespace, for a namespaced resource) the
// writes use; every generated client has it.
type Client[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// Writer writes the objects of one resource as one component's role allows.
type Writer[T Object[T]] struct {
	// Client returns the typed client of namespace ("" for a cluster-scoped resource).
	Client func(namespace string) Client[T]
	// Resource is the resource's plural name, as the role names it: "persistentvolumes".
	Resource string
	// Verb is the verb the role grants on the resource, StatusVerb the one on its status
	// subresource.
	Verb, StatusVerb Verb
	// Conflict is Reread to repeat a change on a fresh GET; any other policy returns the
	// conflict, for the sync to Settle.
	Conflict Conflict
	// Recorder, when set, gets the Warning event of a refused write (controller.WriteFailed);
	// without one only the line is logged, for a caller that records its own event.
	Recorder record.EventRecorder
	// Superseded, when set, records every successful write (the version written over and
	// the one produced) under the object's key: "namespace/name", or "name".
	Superseded *controller.Superseded[string]
}

// Option changes one write.
type Option func(*options)

type options struct {
	checked bool
	on      runtime.Object
	doing   string
}

// Checked makes a patch carry the resourceVersion of the object read, so that a change
// computed from a stale cache fails with a conflict instead of overwriting a newer object
// (upstream's addResourceVersionCheck). An update always carries it.
func Checked() Option { return func(o *options) { o.checked = true } }

// On reports a refused write on obj (the object the write is for) instead of the object
// written.
func On(obj runtime.Object) Option { return func(o *options) { o.on = obj } }

// Doing wraps the error of the write with what the write was for.
func Doing(what string) Option { return func(o *options) { o.doing = what } }

// SetFinalizer adds (present) or removes finalizer f and returns the stored object; obj
// itself, when it is in that state already. obj is left alone.
func (w Writer[T]) SetFinalizer(ctx context.Context, obj T, f string, present bool, opts ...Option) (T, error) {
	return w.Mutate(ctx, obj, func(cur T) bool { return SetFinalizers(cur, present, f) }, opts...)
}

// SetFinalizers adds (present) or removes the finalizers fs on obj in place, for a write
// whose client is not a Writer's, and reports whether the list changed. Added finalizers
// go to the end, in the order given.
func SetFinalizers(obj metav1.Object, present bool, fs ...string) bool {
	list := obj.GetFinalizers()
	changed := false
	for _, f := range fs {
		if slices.Contains(list, f) == present {
			continue
		}
		if present {
			list = append(list, f)
		} else {
			list = slices.DeleteFunc(slices.Clone(list), func(s string) bool { return s == f })
		}
		changed = true
	}
	if changed {
		obj.SetFinalizers(list)
	}
	return changed
}

// Mutate writes what change does to a copy of obj (its metadata or spec), when change
// reports a change, and returns the stored object; obj itself when there was nothing to
// write.
func (w Writer[T]) Mutate(ctx context.Context, obj T, change func(T) bool, opts ...Option) (T, error) {
	o := collect(opts)
	return w.report(ctx, obj, false, o, func() (T, error) {
		cur := obj.DeepCopy()
		if !change(cur) {
			return obj, nil
		}
		if w.Conflict != Reread {
			return w.write(ctx, obj, cur, false, o)
		}
		read, stored := obj, obj
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			out, err := w.write(ctx, read, cur, false, o)
			if err == nil {
				stored = out
				return nil
			}
			if !apierrors.IsConflict(err) {
				return err
			}
			// Read afresh; the object must still be the one of obj's UID.
			fresh, gerr := w.Client(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if fresh.GetUID() != obj.GetUID() {
				return apierrors.NewNotFound(schema.GroupResource{Resource: w.Resource}, obj.GetName())
			}
			read, cur = fresh, fresh.DeepCopy()
			if !change(cur) {
				stored = fresh
				return nil
			}
			return err
		})
		return stored, err
	})
}

// Write writes the difference between old, the object read, and cur (its metadata or
// spec) and returns the stored object; old when there is no difference.
func (w Writer[T]) Write(ctx context.Context, old, cur T, opts ...Option) (T, error) {
	o := collect(opts)
	return w.report(ctx, old, false, o, func() (T, error) { return w.write(ctx, old, cur, false, o) })
}

// WriteStatus is Write for the status subresource.
func (w Writer[T]) WriteStatus(ctx context.Context, old, cur T, opts ...Option) (T, error) {
	o := collect(opts)
	return w.report(ctx, old, true, o, func() (T, error) { return w.write(ctx, old, cur, true, o) })
}

// SendPatch sends a patch of type pt built by the caller (a merge patch of annotations,
// or of a custom resource whose fields carry no strategy) with the verb patch, whatever
// Verb says: the caller chose it. It returns the stored object; obj on an error.
func (w Writer[T]) SendPatch(ctx context.Context, obj T, pt types.PatchType, data []byte, opts ...Option) (T, error) {
	return w.send(ctx, obj, pt, data, false, collect(opts))
}

// SendStatusPatch is SendPatch to the status subresource.
func (w Writer[T]) SendStatusPatch(ctx context.Context, obj T, pt types.PatchType, data []byte, opts ...Option) (T, error) {
	return w.send(ctx, obj, pt, data, true, collect(opts))
}

func (w Writer[T]) send(ctx context.Context, obj T, pt types.PatchType, data []byte, status bool, o options) (T, error) {
	var sub []string
	if status {
		sub = []string{"status"}
	}
	return w.report(ctx, obj, status, o, func() (T, error) {
		out, err := w.Client(obj.GetNamespace()).Patch(ctx, obj.GetName(), pt, data, metav1.PatchOptions{}, sub...)
		if err != nil {
			return obj, errOf(o, err)
		}
		w.record(obj, out)
		return out, nil
	}, Patch)
}

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// write sends cur with the verb of the resource (or subresource): an update of cur, or a
// patch of the difference from old.
func (w Writer[T]) write(ctx context.Context, old, cur T, status bool, o options) (T, error) {
	verb, sub := w.Verb, []string(nil)
	if status {
		verb, sub = w.StatusVerb, []string{"status"}
	}
	cl := w.Client(old.GetNamespace())
	var out T
	var err error
	switch verb {
	case Update:
		if status {
			out, err = cl.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		} else {
			out, err = cl.Update(ctx, cur, metav1.UpdateOptions{})
		}
	case Patch:
		diff := twoWayPatch
		if o.checked {
			diff = versionedPatch
		}
		data, changed, derr := diff(old, cur)
		if derr != nil || !changed {
			return old, derr
		}
		out, err = cl.Patch(ctx, old.GetName(), types.StrategicMergePatchType, data, metav1.PatchOptions{}, sub...)
	default:
		return old, fmt.Errorf("write: no verb for %s", w.Resource)
	}
	if err != nil {
		return old, errOf(o, err)
	}
	w.record(old, out)
	return out, nil
}

func (w Writer[T]) record(old, out T) {
	if w.Superseded == nil {
		return
	}
	key := old.GetName()
	if ns := old.GetNamespace(); ns != "" {
		key = ns + "/" + key
	}
	w.Superseded.Wrote(key, old.GetResourceVersion(), out.GetResourceVersion())
}

func errOf(o options, err error) error {
	if o.doing != "" {
		return fmt.Errorf("%s: %w", o.doing, err)
	}
	return err
}

// report runs do and reports a refused write through controller.WriteFailed, on o.on or
// obj. verb overrides the resource's verb.
func (w Writer[T]) report(ctx context.Context, obj T, status bool, o options, do func() (T, error), verb ...Verb) (T, error) {
	out, err := do()
	if err == nil {
		return out, nil
	}
	v, resource := w.Verb, w.Resource
	if status {
		v, resource = w.StatusVerb, resource+"/status"
	}
	if len(verb) > 0 {
		v = verb[0]
	}
	var on runtime.Object = obj
	if o.on != nil {
		on = o.on
	}
	return out, controller.WriteFailed(ctx, w.Recorder, on, string(v), resource, err)
}

// IgnoreNotFound returns err unless the object is gone, which a removal of a finalizer (or
// a status write for a deleted object) takes as done.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ChangeStatus reads the object with GET, applies change to it and writes its status, and
// does it all again on a conflict (client-go's retry.RetryOnConflict): for a change that
// rests on the object's current state, never on a cache. An error of change ends it and
// is returned as it is; so is a replaced object (another UID).
func (w Writer[T]) ChangeStatus(ctx context.Context, obj T, change func(T) error) (T, error) {
	stored := obj
	return w.report(ctx, obj, true, options{}, func() (T, error) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := w.Client(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.GetUID() != obj.GetUID() {
				return fmt.Errorf("%s %s/%s was replaced", w.Resource, obj.GetNamespace(), obj.GetName())
			}
			read := cur
			cur = cur.DeepCopy()
			if err := change(cur); err != nil {
				return err
			}
			out, err := w.write(ctx, read, cur, true, options{})
			if err != nil {
				return err
			}
			stored = out
			return nil
		})
		return stored, err
	})
}
