// Package snaptest helps the snapshot roles' unit tests drive their sync functions over fake
// clientsets without running informers: listers are rebuilt from what the fake API holds
// before each sync, so each sync sees the writes of the one before.
package snaptest

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
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

// CheckVerbs fails the test for each action on resource whose verb is not a read or one of
// allowed: the sidecars' RBAC grants only some writes, which the fake clientsets do not enforce.
func CheckVerbs(t testing.TB, actions []clienttesting.Action, resource string, allowed ...string) {
	t.Helper()
	for _, a := range actions {
		if a.GetResource().Resource != resource {
			continue
		}
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" && !slices.Contains(allowed, v) {
			t.Errorf("%s on %s (subresource %q): its RBAC does not grant this verb", v, resource, a.GetSubresource())
		}
	}
}

// SawEvent reports whether rec holds an event whose text contains want, draining it.
func SawEvent(rec *record.FakeRecorder, want string) bool {
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, want) {
				return true
			}
		default:
			return false
		}
	}
}
