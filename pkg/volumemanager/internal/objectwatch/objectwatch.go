// Package objectwatch keeps single API objects (ConfigMaps, Secrets) fresh for as long as
// something references them: one list/watch per (namespace, name) with a metadata.name field
// selector, shared by every holder that references the object and stopped when the last
// holder lets go. This is the kubelet's watch-based object manager, and it is what a node's
// credential allows: the Node authorizer grants a list or watch of a Secret or ConfigMap only
// when it names a single object that one of the node's pods references.
package objectwatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Key names one object.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Config configures a Watcher.
type Config struct {
	// Resource names the objects in errors, e.g. {Resource: "secrets"}.
	Resource schema.GroupResource
	// ObjectType is an empty object of the watched type, e.g. &v1.Secret{}.
	ObjectType runtime.Object
	// ListerWatcher returns the list/watch of exactly one object; the caller sets the
	// metadata.name field selector (and, for a node, nothing broader).
	ListerWatcher func(key Key) cache.ListerWatcher
	// Changed is called when an object was added, updated or deleted, and once when its
	// first list completed (so a holder that found nothing learns that the answer is now
	// known). It must not block.
	Changed func(key Key)
	// Transform, if set, is applied to every object before it is stored.
	Transform cache.TransformFunc
	// SyncWait bounds how long Get waits for an object's first list; default 1 s, the
	// kubelet's.
	SyncWait time.Duration
	// Immutable, if set, says whether an object can no longer change (`immutable: true`):
	// once Get has returned such an object its watch is stopped and the copy kept until the
	// last holder lets go, as the kubelet does.
	Immutable func(obj runtime.Object) bool
}

// Watcher holds the watches. The zero value is not usable; use New.
type Watcher struct {
	cfg Config

	mu      sync.Mutex
	ctx     context.Context // nil until Start
	objects map[Key]*entry
	holders map[string][]Key
}

type entry struct {
	refs int
	// frozen: the object is immutable and its watch stopped.
	frozen bool
	store  cache.Store
	ctrl   cache.Controller
	cancel context.CancelFunc
	synced chan struct{}
}

// New returns a Watcher; watches run once Start has been called.
func New(cfg Config) *Watcher {
	if cfg.SyncWait <= 0 {
		cfg.SyncWait = time.Second
	}
	return &Watcher{cfg: cfg, objects: map[Key]*entry{}, holders: map[string][]Key{}}
}

// Start runs the watches of the objects referenced so far, and of those referenced later,
// until ctx ends.
func (w *Watcher) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
	for key, e := range w.objects {
		w.runLocked(key, e)
	}
}

// Set replaces the objects holder references (nil or empty: none). A watch starts when
// the first holder references its object and stops when the last one no longer does.
func (w *Watcher) Set(holder string, keys []Key) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	keys = slices.Compact(keys)
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.holders[holder]
	if len(keys) == 0 {
		delete(w.holders, holder)
	} else {
		w.holders[holder] = keys
	}
	// Add first, then release: an object kept across the change never restarts.
	for _, k := range keys {
		e := w.objects[k]
		if e == nil {
			e = w.newEntry(k)
			w.objects[k] = e
			if w.ctx != nil {
				w.runLocked(k, e)
			}
		}
		e.refs++
	}
	for _, k := range old {
		e := w.objects[k]
		e.refs--
		if e.refs == 0 {
			if e.cancel != nil {
				e.cancel()
			}
			delete(w.objects, k)
		}
	}
}

func (w *Watcher) newEntry(key Key) *entry {
	e := &entry{synced: make(chan struct{})}
	e.store, e.ctrl = cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: w.cfg.ListerWatcher(key),
		ObjectType:    w.cfg.ObjectType,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.changed(key) },
			UpdateFunc: func(any, any) { w.changed(key) },
			DeleteFunc: func(any) { w.changed(key) },
		},
		Transform: w.cfg.Transform,
		// The kubelet's watch-based manager asks for long watches: each object's watch is
		// cheap, and there are as many as the node's pods reference.
		MinWatchTimeout: 30 * time.Minute,
	})
	return e
}

func (w *Watcher) changed(key Key) {
	if w.cfg.Changed != nil {
		w.cfg.Changed(key)
	}
}

// runLocked starts e's watch and a waiter that closes e.synced after its first list. A
// refused list (a 403 while the API server's node graph has not yet seen the pod) is
// retried by the reflector with its backoff.
func (w *Watcher) runLocked(key Key, e *entry) {
	ctx, cancel := context.WithCancel(w.ctx)
	e.cancel = cancel
	go e.ctrl.RunWithContext(ctx)
	go func() {
		delay := 10 * time.Millisecond
		for !e.ctrl.HasSynced() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			// At most 100 ms late: a pod's SetUp waits for this (up to SyncWait).
			delay = min(2*delay, 100*time.Millisecond)
		}
		close(e.synced)
		w.changed(key)
	}()
}

// Get returns the object, a NotFound error if it does not exist, or an error if no holder
// references it or its first list has not completed within SyncWait.
func (w *Watcher) Get(namespace, name string) (runtime.Object, error) {
	key := Key{namespace, name}
	w.mu.Lock()
	e := w.objects[key]
	w.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("object %q/%q not registered", namespace, name)
	}
	select {
	case <-e.synced:
	default:
		t := time.NewTimer(w.cfg.SyncWait)
		defer t.Stop()
		select {
		case <-e.synced:
		case <-t.C:
			return nil, fmt.Errorf("failed to sync %s cache: timed out waiting for the condition", w.cfg.Resource.String())
		}
	}
	obj, exists, err := e.store.GetByKey(key.String())
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(w.cfg.Resource, name)
	}
	if w.cfg.Immutable != nil && w.cfg.Immutable(obj.(runtime.Object)) {
		w.mu.Lock()
		if !e.frozen && e.cancel != nil {
			e.frozen = true
			e.cancel()
		}
		w.mu.Unlock()
	}
	return obj.(runtime.Object), nil
}

// Len is the number of watches held: the distinct objects referenced, less the immutable
// ones whose watch has stopped.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.objects {
		if !e.frozen {
			n++
		}
	}
	return n
}

// Cached lists the keys of the objects held in the watches' stores, for tests that check
// that nothing unreferenced is cached.
func (w *Watcher) Cached() []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Key
	for k, e := range w.objects {
		for _, obj := range e.store.List() {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil && key == k.String() {
				out = append(out, k)
			} else {
				out = append(out, Key{Name: "unexpected:" + key})
			}
		}
	}
	return out
}
