package intent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// lazyDelay bounds how long a dropped record or a learned volume ID waits to be written
// when no CreateVolume waits for a write anyway.
const lazyDelay = time.Second

// Journal is the set of records, held in memory and written to the shards.
type Journal struct {
	client    kubernetes.Interface
	namespace string
	driver    string
	node      string
	// id names the journal of this driver (and node): the shards' label and name.
	id string

	mu      sync.Mutex
	records map[types.UID]Record
	shardOf map[types.UID]*shard
	shards  []*shard
	// memoryOnly is set when the Leases cannot be read or written.
	memoryOnly bool
	// unrecorded holds the claims told ErrUnrecorded, each told once.
	unrecorded map[types.UID]bool
	adopt      func(Record)

	urgent chan struct{} // a CreateVolume waits for a write
	lazy   chan struct{} // a change may wait up to lazyDelay
}

// shard is one Lease of the journal.
type shard struct {
	index int
	name  string
	// exists says that the Lease is stored, rv is its resourceVersion as last seen.
	exists bool
	rv     string
	// uids are the records assigned to the shard; written are those of the last write or
	// read, the base that tells another writer's records from the ones this one dropped.
	uids    map[types.UID]int // record size
	written map[types.UID]bool
	bytes   int
	// gen counts the changes, flushedGen the last one written; flushed closes on a write.
	gen, flushedGen uint64
	flushed         chan struct{}
}

// New returns the journal of driver's provisioner in namespace; node is the node of a
// --node-deployment instance, "" for a central provisioner.
func New(client kubernetes.Interface, namespace, driver, node string) *Journal {
	sum := sha256.Sum256([]byte(driver + "\x00" + node))
	return &Journal{client: client, namespace: namespace, driver: driver, node: node, id: hex.EncodeToString(sum[:])[:12],
		records: map[types.UID]Record{}, shardOf: map[types.UID]*shard{}, unrecorded: map[types.UID]bool{},
		urgent: make(chan struct{}, 1), lazy: make(chan struct{}, 1)}
}

// OnAdopt sets what is told of a record that another writer stored and this journal did
// not know, found when a write conflicts (the claim controller enqueues its claim).
func (j *Journal) OnAdopt(f func(Record)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.adopt = f
}

// Add stores r for claim (replacing any earlier record of the claim) and returns once it
// is durable. Where the journal cannot be written it returns ErrUnrecorded the first time
// for the claim and nil after: the record is then in memory only.
func (j *Journal) Add(ctx context.Context, claim *corev1.PersistentVolumeClaim, r Record) error {
	uid := claim.UID
	r.ClaimUID, r.Namespace, r.Claim = uid, claim.Namespace, claim.Name
	if len(r.Request) > maxRequestBytes {
		r.Request = nil
	}
	j.mu.Lock()
	if j.memoryOnly {
		j.records[uid] = r
		err := j.unrecordedLocked(uid)
		j.mu.Unlock()
		return err
	}
	if old, ok := j.records[uid]; ok && sameRequest(old, r) && j.shardOf[uid] != nil {
		// A retry of a record already added: it is durable once the shard's current
		// generation is written.
		s := j.shardOf[uid]
		want := s.gen
		j.mu.Unlock()
		return j.wait(ctx, uid, s, want)
	}
	s, err := j.placeLocked(uid, r)
	if err != nil {
		j.mu.Unlock()
		return err
	}
	want := s.gen
	j.mu.Unlock()
	signal(j.urgent)
	return j.wait(ctx, uid, s, want)
}

// placeLocked puts r in its claim's shard, or in the first shard with room for it.
func (j *Journal) placeLocked(uid types.UID, r Record) (*shard, error) {
	n := size(uid, r)
	s := j.shardOf[uid]
	if s != nil {
		s.bytes -= s.uids[uid]
	} else {
		for _, c := range j.shards {
			if c.bytes+n <= maxShardBytes {
				s = c
				break
			}
		}
		if s == nil {
			if len(j.shards) >= maxShards {
				return nil, ErrFull
			}
			s = j.shardLocked(len(j.shards))
		}
	}
	j.records[uid], j.shardOf[uid] = r, s
	s.uids[uid] = n
	s.bytes += n
	s.gen++
	return s, nil
}

// shardLocked returns shard i, adding it (and any shard before it) if needed.
func (j *Journal) shardLocked(i int) *shard {
	for len(j.shards) <= i {
		k := len(j.shards)
		j.shards = append(j.shards, &shard{index: k, name: fmt.Sprintf("kubevol-intent-%s-%d", j.id, k),
			uids: map[types.UID]int{}, written: map[types.UID]bool{}, flushed: make(chan struct{})})
	}
	return j.shards[i]
}

func (j *Journal) unrecordedLocked(uid types.UID) error {
	if j.unrecorded[uid] {
		return nil
	}
	j.unrecorded[uid] = true
	return fmt.Errorf("%w: no rights on Leases in namespace %s", ErrUnrecorded, j.namespace)
}

// wait returns once s has written generation want.
func (j *Journal) wait(ctx context.Context, uid types.UID, s *shard, want uint64) error {
	for {
		j.mu.Lock()
		if j.memoryOnly {
			err := j.unrecordedLocked(uid)
			j.mu.Unlock()
			return err
		}
		done, ch := s.flushedGen >= want, s.flushed
		j.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetVolumeID records the ID CreateVolume returned; it is written with the next write.
func (j *Journal) SetVolumeID(uid types.UID, id string) {
	j.mu.Lock()
	r, ok := j.records[uid]
	if ok && r.VolumeID != id {
		r.VolumeID = id
		if j.shardOf[uid] != nil {
			_, _ = j.placeLocked(uid, r) // a record already placed stays in its shard
		} else {
			j.records[uid] = r
		}
	}
	j.mu.Unlock()
	if ok {
		signal(j.lazy)
	}
}

// Remove drops the record of a claim. The write is lazy: a record left behind by a crash
// costs a check at the next start, never a volume.
func (j *Journal) Remove(uid types.UID) {
	j.mu.Lock()
	_, ok := j.records[uid]
	delete(j.records, uid)
	delete(j.unrecorded, uid)
	if s := j.shardOf[uid]; s != nil {
		s.bytes -= s.uids[uid]
		delete(s.uids, uid)
		delete(j.shardOf, uid)
		s.gen++
	}
	j.mu.Unlock()
	if ok {
		signal(j.lazy)
	}
}

// Get returns the record of a claim.
func (j *Journal) Get(uid types.UID) (Record, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.records[uid]
	return r, ok
}

// Len is the number of records.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.records)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
