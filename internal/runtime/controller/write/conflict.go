package write

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// Conflict is what a controller does when a write of its meets a newer version of the
// object (409 Conflict).
type Conflict int

const (
	// Backoff returns the conflict to the queue, which retries the key with its backoff.
	Backoff Conflict = iota
	// Reread reads the object again with GET and repeats the change on it, as client-go's
	// retry.RetryOnConflict: for a write computed from a cache that may lag behind, whose
	// change does not depend on the rest of the object (a finalizer, a status field).
	Reread
	// RetrySoon syncs the key again after RetrySoonAfter, without growing its backoff: the
	// csi-snapshotter's update filter may drop the newer version's event, so the key cannot
	// wait for it.
	RetrySoon
	// WaitForCache drops the conflict: the cache is behind a newer version, whose event
	// syncs the key again (the snapshot-controller). It does not grow the key's backoff,
	// which would delay it by minutes under load.
	WaitForCache
)

// RetrySoonAfter is how soon RetrySoon syncs a key again.
const RetrySoonAfter = 100 * time.Millisecond

// Settle turns the error a sync of key returns into what the queue gets under the policy:
// a conflict becomes a retry after RetrySoonAfter (RetrySoon) or nothing (WaitForCache);
// any other error passes. kind and key name the object in the log.
func (c Conflict) Settle(ctx context.Context, err error, kind, key string) error {
	if !apierrors.IsConflict(err) {
		return err
	}
	switch c {
	case RetrySoon:
		return controller.RetryAfter(RetrySoonAfter)
	case WaitForCache:
		klog.FromContext(ctx).V(4).Info("Conflict, waiting for the newer version", kind, key)
		return nil
	}
	return err
}

// WarnUnlessConflict records err as a Warning event on obj, unless it is a conflict (under
// WaitForCache, the sync of the newer version tries again), and returns err. format takes
// err as its last argument.
func WarnUnlessConflict(rec record.EventRecorder, obj runtime.Object, reason string, err error, format string, args ...any) error {
	if err != nil && !apierrors.IsConflict(err) {
		rec.Eventf(obj, corev1.EventTypeWarning, reason, format, append(args, err)...)
	}
	return err
}
