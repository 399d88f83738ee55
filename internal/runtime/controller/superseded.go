package controller

import "sync"

// Superseded records, per key, the writes of this process that the cache has not delivered
// yet: for each, the resourceVersion it wrote over and the one it produced. The informer
// delivers a version written over after the sync that replaced it, and a sync reading it
// would act on a state already left (call the driver again, for instance); such a sync
// waits for the next delivery instead. A write is recorded only once it succeeded, so
// every version written over has a newer one on its way to the cache. Safe for concurrent
// use by workers and event handlers; the zero value is ready. In memory only: after a
// restart nothing is recorded, and a sync does again what is safe to repeat.
type Superseded[K comparable] struct {
	mu     sync.Mutex
	writes map[K][]written
}

// written is one write: the version it wrote over and the version it produced.
type written struct{ over, wrote string }

// Wrote records a write of key over version over that produced version wrote. A write
// that changed nothing (the same version) is not recorded.
func (s *Superseded[K]) Wrote(key K, over, wrote string) {
	if over == wrote {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writes == nil {
		s.writes = map[K][]written{}
	}
	s.writes[key] = append(s.writes[key], written{over: over, wrote: wrote})
}

// Over reports whether version of key is one this process wrote over. A key without a
// recorded write never matches, not even an object without a resourceVersion.
func (s *Superseded[K]) Over(key K, version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.writes[key] {
		if w.over == version {
			return true
		}
	}
	return false
}

// Pending reports whether key has a write the cache has not delivered yet.
func (s *Superseded[K]) Pending(key K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes[key]) > 0
}

// Delivered is called with each update of key the cache delivers, from version old to
// version cur: the writes over old (the cache has moved past it) and the writes that
// produced cur are dropped. It reports whether any was, so that the handler wakes a sync
// that waited for this delivery. A version older than a write, delivered late, leaves it.
func (s *Superseded[K]) Delivered(key K, old, cur string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.writes[key]
	kept := ws[:0]
	for _, w := range ws {
		if w.over != old && w.wrote != cur {
			kept = append(kept, w)
		}
	}
	dropped := len(kept) != len(ws)
	if len(kept) == 0 {
		delete(s.writes, key)
	} else {
		s.writes[key] = kept
	}
	return dropped
}

// Forget drops the writes of key, once its object is deleted, so that an object
// re-created under the same name starts clean.
func (s *Superseded[K]) Forget(key K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.writes, key)
}
