package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// ReasonWriteFailed is the reason of the Warning event WriteFailed records.
const ReasonWriteFailed = "WriteFailed"

// Refused reports whether err is the API server refusing a request in a way that retrying
// alone does not fix: a role without the verb (403, which is also how an admission webhook
// denies), credentials it does not accept, an object or a request it rejects. A conflict,
// a missing object, a timeout or an unreachable server is not a refusal.
func Refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err) ||
		apierrors.IsUnsupportedMediaType(err)
}

// WriteFailed reports a write the API server refused (see Refused) on the object on, which
// is the object written or the one it is written for (a claim whose PV cannot be created):
// one line at the default verbosity naming on's key, the verb and the resource, and a
// Warning event on on. The caller returns the error to the queue, which retries the key
// with its backoff, so both repeat no faster than that. The line and the event carry only
// the server's message, which names the user, never a credential. Any other error is
// returned as it is, to be logged by the runner at level 2 as every failed sync is. With a
// nil rec only the line is written, for a caller that records its own event (upstream's
// reason) for the same failure.
func WriteFailed(ctx context.Context, rec record.EventRecorder, on runtime.Object, verb, resource string, err error) error {
	if err == nil || !Refused(err) {
		return err
	}
	key, kerr := cache.MetaNamespaceKeyFunc(on)
	if kerr != nil {
		key = fmt.Sprintf("%T", on)
	}
	klog.FromContext(ctx).Error(err, "API write refused; will retry with backoff", "key", key, "verb", verb, "resource", resource)
	if rec != nil {
		rec.Eventf(on, corev1.EventTypeWarning, ReasonWriteFailed, "cannot %s %s: %v", verb, resource, err)
	}
	return err
}
