package snapshotter

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/controller"
)

// Lister is a lister of cluster-scoped objects (contents, classes).
type Lister[T any] interface {
	Get(name string) (T, error)
}

// Getter is the read of a typed client of cluster-scoped objects.
type Getter[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// Get returns the named object from the informer cache, else from the API: an object written
// a moment ago (by this role or an administrator) may not be cached yet.
func Get[T any](ctx context.Context, cache Lister[T], api Getter[T], name string) (T, error) {
	obj, err := cache.Get(name)
	if apierrors.IsNotFound(err) {
		obj, err = api.Get(ctx, name, metav1.GetOptions{})
	}
	return obj, err
}

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

// Without returns list without s.
func Without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
