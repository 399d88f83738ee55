// Package snaptest helps the snapshot roles' unit tests drive their sync functions over fake
// clientsets without running informers: listers are rebuilt from what the fake API holds
// before each sync, so each sync sees the writes of the one before.
package snaptest

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// Indexer holds items (a List's Items) under the informers' keys and namespace index.
func Indexer[T any, PT interface {
	*T
	runtime.Object
}](t testing.TB, items []T) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for i := range items {
		if err := idx.Add(PT(&items[i])); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}
