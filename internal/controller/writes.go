package controller

import (
	"sync"
	"time"
)

// Writes remembers, per key, a write of this process that the cache has not shown yet,
// so that a sync reading the cache does not redo it. The package doc lists its guarantees.
type Writes[K comparable] struct {
	// Window, when positive, is how long a mark lasts: past it the cache is deemed to have
	// missed the write, and the key is handled again (which must be safe, only wasteful).
	Window time.Duration

	mu    sync.Mutex
	marks map[K]mark
	now   func() time.Time // time.Now; tests replace it
}

// mark is one expected write: the resourceVersion it produced ("" when there is none to
// match) and when it was made.
type mark struct {
	version string
	at      time.Time
}

// Expect records a write of key that produced version, replacing any earlier mark.
func (w *Writes[K]) Expect(key K, version string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set(key, version)
}

// ExpectUnless records a write as Expect does, unless inCache reports that the cache
// already shows it. inCache runs under the tracker's lock, which the event handler that
// calls Forget or Observe also takes.
func (w *Writes[K]) ExpectUnless(key K, version string, inCache func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !inCache() {
		w.set(key, version)
	}
}

// Observe is called with each version of key that the cache delivers: the mark goes once
// the cache shows the version that was written.
func (w *Writes[K]) Observe(key K, version string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m, ok := w.marks[key]; ok && m.version == version {
		delete(w.marks, key)
	}
}

// Pending reports whether key has a live mark.
func (w *Writes[K]) Pending(key K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.get(key)
	return ok
}

// Is reports whether key has a live mark for exactly version.
func (w *Writes[K]) Is(key K, version string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.get(key)
	return ok && m.version == version
}

// Remaining is how much of the Window is left for key's mark; zero without a live mark
// or without a Window.
func (w *Writes[K]) Remaining(key K) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.get(key)
	if !ok || w.Window <= 0 {
		return 0
	}
	return w.Window - w.clock().Sub(m.at)
}

// Take reports whether key had a live mark and clears it.
func (w *Writes[K]) Take(key K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.get(key)
	delete(w.marks, key)
	return ok
}

// Forget clears key's mark, e.g. once its object is deleted.
func (w *Writes[K]) Forget(key K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.marks, key)
}

func (w *Writes[K]) set(key K, version string) {
	if w.marks == nil {
		w.marks = map[K]mark{}
	}
	w.marks[key] = mark{version: version, at: w.clock()}
}

// get returns key's mark, dropping it if its window has passed. The caller holds mu.
func (w *Writes[K]) get(key K) (mark, bool) {
	m, ok := w.marks[key]
	if ok && w.Window > 0 && w.clock().Sub(m.at) >= w.Window {
		delete(w.marks, key)
		return mark{}, false
	}
	return m, ok
}

func (w *Writes[K]) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}
