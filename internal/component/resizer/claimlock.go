package resizer

import "sync"

// claimLocks serialises the expansion and the modification of one claim: each sync holds
// its claim's lock, so the two never write the claim or call the driver for the volume at
// the same time (upstream runs two controllers that race and retry on conflicts).
type claimLocks struct {
	mu    sync.Mutex
	locks map[string]*claimLock
}

type claimLock struct {
	sync.Mutex
	users int
}

// lock takes key's lock and returns its release.
func (l *claimLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*claimLock{}
	}
	k := l.locks[key]
	if k == nil {
		k = &claimLock{}
		l.locks[key] = k
	}
	k.users++
	l.mu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		if k.users--; k.users == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
}
