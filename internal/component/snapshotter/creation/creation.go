// Package creation is the csi-snapshotter's crash-safe create protocol, which upstream runs
// for a VolumeSnapshotContent (CreateSnapshot) and a VolumeGroupSnapshotContent
// (CreateVolumeGroupSnapshot) alike: a create is made only for a content that carries its
// bound finalizer, and only after the being-created annotation is stored; the annotation
// goes once the handle is in the status, or the driver gave a final error. A process killed
// at any point finds the content again and repeats the create under the same name.
package creation

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// Create is the protocol for one content kind T whose CSI request is R.
type Create[T write.Object[T], R any] struct {
	// Writer writes the content; it reports a refused write on the content Run is given.
	Writer   write.Writer[T]
	Recorder record.EventRecorder
	// Op names the CSI call in the logs.
	Op string
	// BoundFinalizer and BeingCreated are the kind's bound finalizer and being-created
	// annotation; Reason is the event reason of a failure.
	BoundFinalizer, BeingCreated, Reason string
	// NotReady is returned while the driver has not finished the snapshot: the content is
	// synced again with backoff.
	NotReady error
	// Handle is the backend handle in the content's status, "" for none; Ready reports
	// its status.readyToUse.
	Handle func(T) string
	Ready  func(T) bool
	// ErrorMessage is the message of the content's status.error, nil for none.
	ErrorMessage func(T) *string
	// Request builds the CSI request; its error is the user's to fix (nothing was asked of
	// the driver).
	Request func(context.Context, T) (R, error)
	// Lock, if set, is taken around the call.
	Lock func(context.Context, R) (unlock func(), err error)
	// Call makes the CSI call and returns the status it gives the content and whether the
	// snapshot is ready.
	Call func(context.Context, R) (st map[string]any, ready bool, err error)
	// Failure is the message of a failed call.
	Failure func(R, error) string
}

// Run creates the backend snapshot of content and records the answer. It returns the
// content as last written.
func (p Create[T, R]) Run(ctx context.Context, content T) (T, error) {
	on := write.On(content)
	if !snapshotter.HasFinalizer(content, p.BoundFinalizer) {
		// The snapshot-controller adds it; until then the content could vanish unseen, and
		// with it the only record of the backend snapshot. Its arrival requeues the content.
		klog.FromContext(ctx).V(4).Info("Waiting for the content's finalizer before " + p.Op)
		return content, nil
	}
	if p.Handle(content) != "" && p.Ready(content) {
		// The answer is recorded: upstream makes no call for a ready content. The
		// annotation is left by a kill between the status write and its removal; a
		// second call whose reply is lost would record an error over the ready status.
		if content.GetAnnotations()[p.BeingCreated] == "yes" {
			return p.setBeingCreated(ctx, content, false, on)
		}
		return content, nil
	}
	req, err := p.Request(ctx, content)
	if err != nil {
		p.Recorder.Event(content, corev1.EventTypeWarning, p.Reason, err.Error())
		if out, perr := p.setError(ctx, content, err.Error(), on); perr != nil {
			return out, perr
		}
		return content, err
	}
	hasHandle := p.Handle(content) != ""
	if !hasHandle && content.GetAnnotations()[p.BeingCreated] != "yes" {
		if content, err = p.setBeingCreated(ctx, content, true, on); err != nil {
			return content, err
		}
	}
	unlock := func() {}
	if p.Lock != nil {
		if unlock, err = p.Lock(ctx, req); err != nil {
			return content, err
		}
	}
	st, ready, err := p.Call(ctx, req)
	unlock()
	if err != nil {
		msg := p.Failure(req, err)
		p.Recorder.Event(content, corev1.EventTypeWarning, p.Reason, msg)
		out, perr := p.setError(ctx, content, msg, on)
		if perr != nil {
			return content, perr
		}
		if !MayBeInProgress(err) && !hasHandle {
			// A final answer: nothing exists in the backend, the content may go.
			if out, perr = p.setBeingCreated(ctx, out, false, on); perr != nil {
				return content, perr
			}
		}
		return out, err
	}
	if content, err = contentwrite.PatchStatus(ctx, p.Writer, content, st, on); err != nil {
		return content, err
	}
	if content.GetAnnotations()[p.BeingCreated] == "yes" {
		if content, err = p.setBeingCreated(ctx, content, false, on); err != nil {
			return content, err
		}
	}
	if !ready {
		return content, p.NotReady // the create is repeated with the same name until ready
	}
	return content, nil
}

func (p Create[T, R]) setBeingCreated(ctx context.Context, content T, set bool, on write.Option) (T, error) {
	return contentwrite.Annotate(ctx, p.Writer, content, p.BeingCreated, set, on)
}

func (p Create[T, R]) setError(ctx context.Context, content T, msg string, on write.Option) (T, error) {
	return contentwrite.SetError(ctx, p.Writer, content, p.ErrorMessage(content), msg, on)
}

// MayBeInProgress is upstream's non-final classification for a create: the call may still
// take effect, so the content stays blocked from deletion. ResourceExhausted counts too.
func MayBeInProgress(err error) bool {
	return csiclient.MayBeInProgress(err) || status.Code(err) == codes.ResourceExhausted
}
