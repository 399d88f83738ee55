package controller

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// a moment ago (by this controller or an administrator) may not be cached yet.
func Get[T any](ctx context.Context, cache Lister[T], api Getter[T], name string) (T, error) {
	obj, err := cache.Get(name)
	if apierrors.IsNotFound(err) {
		obj, err = api.Get(ctx, name, metav1.GetOptions{})
	}
	return obj, err
}
