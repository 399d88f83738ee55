package state

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// Committer persists one document with group commit, as databases do with their log: the
// changes made while a write is in progress are all covered by the next write, so that N
// concurrent changes cost about two writes and fsyncs instead of N, and no caller queues
// behind the fsyncs of the others. Each caller still waits until its own change is on disk,
// so what a crash leaves is exactly what the one-save-per-change scheme left.
//
// The document lives in memory and is guarded by its owner's lock, which the Committer
// takes to encode it. The owner changes it with
//
//	mu.Lock(); change the document; err := committer.Commit() // releases mu
//
// and Commit returns once the change is durable, or rolled back and err says why.
type Committer struct {
	file     *File
	lock     sync.Locker
	doc      func() any
	rollback func(error)
	// leader is a one-slot semaphore: the waiter that holds it writes the next batch.
	leader chan struct{}
	// pending collects the changes made since the document was last encoded; guarded by
	// lock. nil when there are none.
	pending *batch
	// inflight is the batch encoded and being written; guarded by lock. A reader has seen
	// its changes in memory, so Barrier waits for it too.
	inflight *batch

	writes, changes atomic.Uint64

	// BeforeWrite, if set, runs before each write with the number of changes it covers. Set
	// it before the first change; tests use it to count writes and to hold one back.
	BeforeWrite func(changes int)
}

// batch is the set of changes one write covers.
type batch struct {
	changes int
	done    chan struct{}
	err     error
}

// NewCommitter returns a Committer for the document doc returns, which lock guards.
// rollback runs with lock held after a failed write: it must bring the document back to
// what the file holds, so that memory never claims more than the disk.
func NewCommitter(file *File, lock sync.Locker, doc func() any, rollback func(error)) *Committer {
	return &Committer{file: file, lock: lock, doc: doc, rollback: rollback, leader: make(chan struct{}, 1)}
}

// Commit persists the changes the caller made to the document: they join the next write,
// the lock (which the caller holds) is released, and Commit returns once they are durable,
// or were rolled back because the write failed. The lock must not be held while waiting,
// for the write needs it to encode the document.
//
// It takes no context: a caller that stopped waiting could not take its change back, and
// the wait is bounded by two writes.
func (c *Committer) Commit() error {
	if c.pending == nil {
		c.pending = &batch{done: make(chan struct{})}
	}
	b := c.pending
	b.changes++
	c.lock.Unlock()
	return c.wait(b)
}

// Barrier returns once every change made so far is durable, for a reader that must not
// answer with a change a crash could still take back. Like Commit it is called with the
// lock held and releases it.
func (c *Committer) Barrier() error {
	b := c.pending
	if b == nil {
		b = c.inflight
	}
	c.lock.Unlock()
	if b == nil {
		return nil
	}
	return c.wait(b)
}

func (c *Committer) wait(b *batch) error {
	for {
		select {
		case <-b.done:
			return b.err
		case c.leader <- struct{}{}:
			select {
			case <-b.done: // the previous leader's write covered b
			default:
				c.writePending()
			}
			<-c.leader
		}
	}
}

// writePending encodes the document with every change made so far and writes it. Only the
// leader calls it.
func (c *Committer) writePending() {
	c.lock.Lock()
	b := c.pending
	c.pending, c.inflight = nil, b
	data, err := json.Marshal(c.doc())
	c.lock.Unlock()
	if b == nil {
		return
	}
	defer func() {
		c.lock.Lock()
		c.inflight = nil
		c.lock.Unlock()
	}()
	if err == nil {
		if c.BeforeWrite != nil {
			c.BeforeWrite(b.changes)
		}
		err = c.file.Write(data)
	}
	if err == nil {
		c.writes.Add(1)
		c.changes.Add(uint64(b.changes))
	} else {
		c.lock.Lock()
		c.rollback(err)
		// The rollback also dropped the changes made after the encode: fail them too.
		if p := c.pending; p != nil {
			c.pending = nil
			p.finish(err)
		}
		c.lock.Unlock()
	}
	b.finish(err)
}

func (b *batch) finish(err error) {
	b.err = err
	close(b.done)
}

// Writes is the number of successful writes (each one fsync of the document and one of its directory)
// and the number of changes they covered; changes/writes is the batching factor.
func (c *Committer) Writes() (writes, changes uint64) {
	return c.writes.Load(), c.changes.Load()
}
