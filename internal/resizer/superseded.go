package resizer

import "sync"

// superseded holds, per claim (and per PV), the resourceVersions this controller has written over.
// The informer delivers each of them after the sync that replaced it, and a sync reading
// one would act on a state already left: ControllerResizeInProgress, for instance, after
// the expansion finished, which would call the driver again. Such a sync waits for the
// next delivery instead. A version is added only once its write succeeded, so every
// version in the set has a newer one on its way to the cache.
type superseded struct {
	mu       sync.Mutex
	versions map[string]map[string]bool
}

// add records that the write over version of key succeeded.
func (s *superseded) add(key, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.versions == nil {
		s.versions = map[string]map[string]bool{}
	}
	if s.versions[key] == nil {
		s.versions[key] = map[string]bool{}
	}
	s.versions[key][version] = true
}

// has reports whether version of key was written over.
func (s *superseded) has(key, version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[key][version]
}

// take reports whether version of key was written over and forgets it: the informer
// has delivered the version after it, which it does once for every version it held.
func (s *superseded) take(key, version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.versions[key][version] {
		return false
	}
	delete(s.versions[key], version)
	if len(s.versions[key]) == 0 {
		delete(s.versions, key)
	}
	return true
}

// forget drops key, once its claim is deleted.
func (s *superseded) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.versions, key)
}
