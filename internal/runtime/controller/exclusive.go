package controller

import "sync"

// Exclusive makes queues over the same keys keep the promise a single queue keeps: no key is
// synced by two workers at once. A controller splits one kind of object over several queues,
// each with its own workers, when one operation must not wait behind another (the
// attacher's attach and detach, which external-attacher serves from one queue, so that a
// burst of detaches delays every attach). The object's state decides its queue, and it can
// change while a sync runs: a VolumeAttachment deleted during its ControllerPublish is
// queued for detach at once, and ControllerUnpublish must not start before the publish
// has returned.
//
// A worker that takes a key another queue is syncing does not wait for it, which would
// hold a worker of its queue hostage to the other one's slow call: it puts the key down,
// and the other queue's worker hands the key back to it once its sync has returned. The key
// keeps its backoff in each queue.
func Exclusive[K comparable](queues ...*Queue[K]) {
	x := &exclusive[K]{syncing: map[K]*Queue[K]{}, deferred: map[K][]*Queue[K]{}}
	for _, q := range queues {
		q.exclusive = x
	}
}

type exclusive[K comparable] struct {
	mu sync.Mutex
	// syncing is the queue whose worker syncs each key.
	syncing map[K]*Queue[K]
	// deferred are the queues that took a key while another synced it, to be given it back.
	deferred map[K][]*Queue[K]
}

// acquire reports whether q's worker may sync key; when it may not, q gets key back once
// the sync in flight returns.
func (x *exclusive[K]) acquire(q *Queue[K], key K) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if holder, busy := x.syncing[key]; busy && holder != q {
		for _, d := range x.deferred[key] {
			if d == q {
				return false
			}
		}
		x.deferred[key] = append(x.deferred[key], q)
		return false
	}
	x.syncing[key] = q
	return true
}

// release ends the sync of key and hands it to the queues that were kept from it.
func (x *exclusive[K]) release(key K) {
	x.mu.Lock()
	waiting := x.deferred[key]
	delete(x.syncing, key)
	delete(x.deferred, key)
	x.mu.Unlock()
	for _, q := range waiting {
		q.Add(key)
	}
}
