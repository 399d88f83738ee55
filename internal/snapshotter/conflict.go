package snapshotter

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/controller"
)

// ConflictRetry is how soon the csi-snapshotter syncs a content again whose write met a
// newer version: its update filter may drop that version's event, so the content cannot
// wait for it.
const ConflictRetry = 100 * time.Millisecond

// RetryConflict turns a conflict into a retry after ConflictRetry, which does not grow the
// backoff; other errors pass.
func RetryConflict(err error) error {
	if apierrors.IsConflict(err) {
		return controller.RetryAfter(ConflictRetry)
	}
	return err
}

// WaitOnConflict is the snapshot-controller's answer to a conflict: the cache is behind a
// newer version of the object or its content, and that version's event syncs the object
// again, so it is not a failure and does not grow the object's backoff (which would delay it
// by minutes under load). kind and key name the object in the log.
func WaitOnConflict(ctx context.Context, err error, kind, key string) error {
	if apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(4).Info("Conflict, waiting for the newer version", kind, key)
		return nil
	}
	return err
}

// WarnUnlessConflict records err as a Warning event on obj, unless it is a conflict (the
// sync of the newer version tries again), and returns err. format takes err as its last
// argument.
func WarnUnlessConflict(rec record.EventRecorder, obj runtime.Object, reason string, err error, format string, args ...any) error {
	if err != nil && !apierrors.IsConflict(err) {
		rec.Eventf(obj, corev1.EventTypeWarning, reason, format, append(args, err)...)
	}
	return err
}
