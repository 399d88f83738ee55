package intent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// The shards' label (the journal's id), and their annotations: the driver and node they
// belong to (checked, so that an id collision never mixes two journals) and the records.
const (
	LabelJournal      = "provisioning.kubevol.io/journal"
	annDriver         = "provisioning.kubevol.io/driver"
	annNode           = "provisioning.kubevol.io/node"
	AnnotationRecords = "provisioning.kubevol.io/records"
)

// maxShardBytes keeps a shard's records well below the API server's 256 KiB limit on an
// object's annotations; maxShards bounds the journal (about 12 MiB of records, tens of
// thousands of CreateVolume calls in flight).
const (
	maxShardBytes = 200 << 10
	maxShards     = 64
)

// Selector selects the shards of the journal of driver (and node) in a List.
func Selector(driver, node string) string {
	return LabelJournal + "=" + New(nil, "", driver, node).id
}

// Load reads the journal, as earlier runs or leaders left it, and returns its records.
// Call it each time this process starts to lead, before Run and any Add. Where the Leases
// cannot be listed it logs so once and the journal is kept in memory only.
func (j *Journal) Load(ctx context.Context) ([]Record, error) {
	list, err := j.client.CoordinationV1().Leases(j.namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelJournal + "=" + j.id})
	j.mu.Lock()
	defer j.mu.Unlock()
	j.records, j.shardOf, j.shards, j.memoryOnly = map[types.UID]Record{}, map[types.UID]*shard{}, nil, false
	if apierrors.IsForbidden(err) {
		j.memoryOnly = true
		klog.FromContext(ctx).Error(err, "The provisioning journal cannot be read: volumes in flight are recorded in memory only, and a crash before a PV is saved can leak a volume whose claim is deleted meanwhile; grant the provisioner get, list, create and update on leases in its namespace, as external-provisioner's role does", "namespace", j.namespace)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the provisioning journal in namespace %s: %w", j.namespace, err)
	}
	var out []Record
	for i := range list.Items {
		l := &list.Items[i]
		idx, ok := j.index(l)
		if !ok {
			continue
		}
		s := j.shardLocked(idx)
		s.exists, s.rv = true, l.ResourceVersion
		recs, err := decode(l.Annotations[AnnotationRecords])
		if err != nil {
			// Overwritten with the next write: what it held cannot be acted on anyway.
			klog.FromContext(ctx).Error(err, "A shard of the provisioning journal cannot be read; the volumes it recorded, if any, are left on the backend", "lease", klog.KObj(l))
			continue
		}
		for uid, r := range recs {
			j.adoptLocked(s, uid, r)
			out = append(out, r)
		}
	}
	return out, nil
}

// index is the shard number of l, if l is a shard of this journal.
func (j *Journal) index(l *coordinationv1.Lease) (int, bool) {
	if l.Annotations[annDriver] != j.driver || l.Annotations[annNode] != j.node {
		return 0, false
	}
	n, err := strconv.Atoi(l.Name[strings.LastIndexByte(l.Name, '-')+1:])
	return n, err == nil && n >= 0 && n < maxShards && l.Name == fmt.Sprintf("kubevol-intent-%s-%d", j.id, n)
}

// adoptLocked takes a stored record into memory, as written.
func (j *Journal) adoptLocked(s *shard, uid types.UID, r Record) {
	n := size(uid, r)
	j.records[uid], j.shardOf[uid] = r, s
	s.uids[uid], s.written[uid] = n, true
	s.bytes += n
}

// Run writes the journal until ctx ends: at once when a CreateVolume waits, else within
// lazyDelay. A failed write is retried with a growing delay; a refusal (no rights on
// Leases) turns the journal to memory only.
func (j *Journal) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("namespace", j.namespace)
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-j.urgent:
		case <-j.lazy:
			select {
			case <-ctx.Done():
				return
			case <-j.urgent:
			case <-time.After(lazyDelay):
			}
		}
		for {
			err := j.flush(ctx)
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsForbidden(err) {
				j.toMemory(ctx, err)
				break
			}
			logger.Error(err, "Writing the provisioning journal failed; retrying", "retryIn", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// toMemory turns the journal to memory only and releases the waiting Adds.
func (j *Journal) toMemory(ctx context.Context, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.memoryOnly {
		return
	}
	j.memoryOnly = true
	klog.FromContext(ctx).Error(err, "The provisioning journal cannot be written: volumes in flight are recorded in memory only, and a crash before a PV is saved can leak a volume whose claim is deleted meanwhile; grant the provisioner create and update on leases in its namespace, as external-provisioner's role does", "namespace", j.namespace)
	for _, s := range j.shards {
		close(s.flushed)
		s.flushed = make(chan struct{})
	}
}

// flush writes every shard with changes.
func (j *Journal) flush(ctx context.Context) error {
	j.mu.Lock()
	var dirty []*shard
	if !j.memoryOnly {
		for _, s := range j.shards {
			if s.gen != s.flushedGen {
				dirty = append(dirty, s)
			}
		}
	}
	j.mu.Unlock()
	for _, s := range dirty {
		if err := j.write(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// write stores s. On a conflict it merges the stored shard (adopting the records another
// writer added) and writes again.
func (j *Journal) write(ctx context.Context, s *shard) error {
	leases := j.client.CoordinationV1().Leases(j.namespace)
	for attempt := 0; ; attempt++ {
		j.mu.Lock()
		gen, rv, exists := s.gen, s.rv, s.exists
		recs := make(map[types.UID]Record, len(s.uids))
		for uid := range s.uids {
			recs[uid] = j.records[uid]
		}
		j.mu.Unlock()
		data, err := encode(recs)
		if err != nil {
			return err
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: j.namespace, ResourceVersion: rv,
			Labels:      map[string]string{LabelJournal: j.id},
			Annotations: map[string]string{annDriver: j.driver, annNode: j.node, AnnotationRecords: data}}}
		var out *coordinationv1.Lease
		if !exists {
			out, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else {
			out, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err == nil {
			j.mu.Lock()
			s.exists, s.rv = true, out.ResourceVersion
			s.written = make(map[types.UID]bool, len(recs))
			for uid := range recs {
				s.written[uid] = true
			}
			if gen > s.flushedGen {
				s.flushedGen = gen
				close(s.flushed)
				s.flushed = make(chan struct{})
			}
			j.mu.Unlock()
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) || attempt >= 5 {
			return fmt.Errorf("writing Lease %s/%s of the provisioning journal: %w", j.namespace, s.name, err)
		}
		if err := j.merge(ctx, s); err != nil {
			return err
		}
	}
}

// merge reads s as stored and adopts the records another writer added to it: a previous
// leader's last write may land after this leader's Load.
func (j *Journal) merge(ctx context.Context, s *shard) error {
	cur, err := j.client.CoordinationV1().Leases(j.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		j.mu.Lock()
		s.exists, s.rv = false, ""
		j.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Lease %s/%s of the provisioning journal: %w", j.namespace, s.name, err)
	}
	stored, err := decode(cur.Annotations[AnnotationRecords])
	if err != nil {
		stored = nil // unreadable: overwritten
	}
	var adopted []Record
	j.mu.Lock()
	s.exists, s.rv = true, cur.ResourceVersion
	for uid, r := range stored {
		if _, known := j.records[uid]; !known && !s.written[uid] {
			j.adoptLocked(s, uid, r)
			s.gen++
			adopted = append(adopted, r)
		}
	}
	adopt := j.adopt
	j.mu.Unlock()
	for _, r := range adopted {
		klog.FromContext(ctx).Info("Adopted a provisioning record written by another provisioner", "pvc", klog.KRef(r.Namespace, r.Claim), "pv", r.PVName)
		if adopt != nil {
			adopt(r)
		}
	}
	return nil
}
