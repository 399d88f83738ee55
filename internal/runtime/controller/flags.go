package controller

import (
	"sync"
	"time"
)

// Flags is a set of keys, each flagged for something only this process knows: a sync in
// progress, a driver call that failed for good, a one-shot request for the next sync. With
// a Window a flag expires, so that a flag whose clearing event was lost delays a key by at
// most the window, never forever. Flags live in memory only: after a restart the set is
// empty, so a flag must only ever save work that is safe to repeat. Safe for concurrent use
// by workers and event handlers; the zero value is ready.
type Flags[K comparable] struct {
	// Window, when positive, is how long a flag lasts.
	Window time.Duration

	mu  sync.Mutex
	set map[K]time.Time // when each flag was set
	now func() time.Time
}

// Set flags key, restarting its window.
func (f *Flags[K]) Set(key K) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put(key)
}

// SetUnless flags key unless done reports that what the flag waits for has happened
// already. done runs under the set's lock, which Clear also takes: an informer stores an
// object before it calls the handler that clears the flag, so no interleaving of the check
// and the handler leaves a stale flag behind.
func (f *Flags[K]) SetUnless(key K, done func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !done() {
		f.put(key)
	}
}

// Has reports whether key is flagged.
func (f *Flags[K]) Has(key K) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.get(key)
	return ok
}

// Remaining is how much of the Window is left for key's flag; zero without a flag or
// without a Window.
func (f *Flags[K]) Remaining(key K) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.get(key)
	if !ok || f.Window <= 0 {
		return 0
	}
	return f.Window - f.clock().Sub(at)
}

// Take reports whether key was flagged and clears the flag, so that a one-shot request is
// acted on by exactly one sync; a sync that fails sets it again.
func (f *Flags[K]) Take(key K) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.get(key)
	delete(f.set, key)
	return ok
}

// Clear drops key's flag.
func (f *Flags[K]) Clear(key K) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.set, key)
}

// ClearIf drops the flag of every key match accepts.
func (f *Flags[K]) ClearIf(match func(K) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.set {
		if match(k) {
			delete(f.set, k)
		}
	}
}

func (f *Flags[K]) put(key K) {
	if f.set == nil {
		f.set = map[K]time.Time{}
	}
	f.set[key] = f.clock()
}

// get returns when key was flagged, dropping a flag whose window has passed. The caller
// holds mu.
func (f *Flags[K]) get(key K) (time.Time, bool) {
	at, ok := f.set[key]
	if ok && f.Window > 0 && f.clock().Sub(at) >= f.Window {
		delete(f.set, key)
		return time.Time{}, false
	}
	return at, ok
}

func (f *Flags[K]) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}
