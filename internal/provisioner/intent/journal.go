// Package intent is the provisioner's durable record of volumes it may have created on the
// backend but not yet recorded in a PersistentVolume. A record is written, and waited for,
// before CreateVolume; it is dropped once the PV exists or the volume is deleted. After a
// crash, or when a claim disappears while CreateVolume is in flight, the records say which
// backend volumes to delete, which closes external-provisioner issue #486.
//
// The records live in one ConfigMap. Writes are group-committed: the CreateVolume calls that
// start together share one API write, so a burst of provisions costs a few writes a second
// instead of two PVC updates per claim.
package intent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// dataKey holds the records in the ConfigMap.
const dataKey = "intents.json"

// maxBytes keeps the ConfigMap well below the 1 MiB object limit. When the journal is full,
// new provisions wait (their claims are retried) rather than risk an untracked volume.
const maxBytes = 800 << 10

// lazyDelay bounds how long a removal or an added volume ID may wait to be written, when no
// provision is waiting for a write anyway.
const lazyDelay = time.Second

// ErrFull is returned by Add when the journal has no room for another record.
var ErrFull = errors.New("intent journal is full: too many volumes in flight")

// Record describes one CreateVolume that may have taken effect.
type Record struct {
	ClaimUID  types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Claim     string    `json:"claim"`
	PVName    string    `json:"pv"`
	// VolumeID is set once CreateVolume has answered.
	VolumeID string `json:"volumeID,omitempty"`
	// Request is the CreateVolumeRequest without secrets (protobuf), to repeat it (CSI
	// CreateVolume is idempotent by name) when the volume ID is not known.
	Request []byte `json:"request,omitempty"`
	// Secret is the provisioner secret for CreateVolume and DeleteVolume.
	Secret *corev1.SecretReference `json:"secret,omitempty"`
}

// Journal is the set of records, cached in memory and written to a ConfigMap.
type Journal struct {
	client    kubernetes.Interface
	namespace string
	name      string

	mu         sync.Mutex
	records    map[types.UID]Record
	gen        uint64 // bumped by every change
	flushedGen uint64 // the last generation written
	flushed    chan struct{}
	urgent     chan struct{} // someone waits for a write
	lazy       chan struct{} // a change may wait up to lazyDelay
	size       int
	rv         string
}

// New returns a journal kept in ConfigMap namespace/name.
func New(client kubernetes.Interface, namespace, name string) *Journal {
	return &Journal{
		client: client, namespace: namespace, name: name,
		records: map[types.UID]Record{},
		flushed: make(chan struct{}),
		urgent:  make(chan struct{}, 1),
		lazy:    make(chan struct{}, 1),
	}
}

// Load reads the records left by earlier runs, creating the ConfigMap if needed. Call it
// once, before Run and before any Add.
func (j *Journal) Load(ctx context.Context) ([]Record, error) {
	cms := j.client.CoreV1().ConfigMaps(j.namespace)
	cm, err := cms.Get(ctx, j.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: j.namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "kubevol-provisioner"}},
			Data: map[string]string{dataKey: "{}"},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("intent journal %s/%s: %w", j.namespace, j.name, err)
	}
	recs := map[types.UID]Record{}
	if s := cm.Data[dataKey]; s != "" {
		if err := json.Unmarshal([]byte(s), &recs); err != nil {
			return nil, fmt.Errorf("intent journal %s/%s is corrupt: %w", j.namespace, j.name, err)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.records, j.rv = recs, cm.ResourceVersion
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		out = append(out, r)
	}
	return out, nil
}

// Add stores r (replacing any record of the same claim) and returns once it is durable.
func (j *Journal) Add(ctx context.Context, r Record) error {
	j.mu.Lock()
	if old, ok := j.records[r.ClaimUID]; ok && sameRecord(old, r) && j.flushedGen == j.gen {
		j.mu.Unlock()
		return nil // a retry of a record already written
	}
	if j.size > maxBytes {
		j.mu.Unlock()
		return ErrFull
	}
	j.records[r.ClaimUID] = r
	j.gen++
	want := j.gen
	j.mu.Unlock()
	signal(j.urgent)
	return j.wait(ctx, want)
}

func sameRecord(a, b Record) bool {
	return a.PVName == b.PVName && a.VolumeID == b.VolumeID && string(a.Request) == string(b.Request)
}

func (j *Journal) wait(ctx context.Context, want uint64) error {
	for {
		j.mu.Lock()
		done, ch := j.flushedGen >= want, j.flushed
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

// SetVolumeID records the ID CreateVolume returned, without waiting for the write: until
// it lands, a cleanup repeats CreateVolume to learn the ID.
func (j *Journal) SetVolumeID(uid types.UID, id string) {
	j.mu.Lock()
	r, ok := j.records[uid]
	if ok && r.VolumeID != id {
		r.VolumeID = id
		j.records[uid] = r
		j.gen++
	}
	j.mu.Unlock()
	if ok {
		signal(j.lazy)
	}
}

// Remove drops the record of a claim, without waiting for the write: a stale record only
// costs a check at the next start.
func (j *Journal) Remove(uid types.UID) {
	j.mu.Lock()
	_, ok := j.records[uid]
	if ok {
		delete(j.records, uid)
		j.gen++
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

// Flush writes pending changes now and waits for them.
func (j *Journal) Flush(ctx context.Context) error {
	j.mu.Lock()
	want := j.gen
	j.mu.Unlock()
	signal(j.urgent)
	return j.wait(ctx, want)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run writes changes until ctx ends: at once when a provision waits, else within lazyDelay.
func (j *Journal) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("configmap", klog.KRef(j.namespace, j.name))
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
			err := j.write(ctx)
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Writing the intent journal failed; retrying", "retryIn", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

func (j *Journal) write(ctx context.Context) error {
	j.mu.Lock()
	if j.flushedGen == j.gen {
		j.mu.Unlock()
		return nil
	}
	gen := j.gen
	data, err := json.Marshal(j.records)
	rv := j.rv
	j.mu.Unlock()
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: j.namespace, ResourceVersion: rv,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "kubevol-provisioner"}},
		Data: map[string]string{dataKey: string(data)},
	}
	out, err := j.client.CoreV1().ConfigMaps(j.namespace).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone else wrote it (a previous leader, or an administrator). Our memory is the
		// truth while we lead: take the new version and write again.
		cur, gerr := j.client.CoreV1().ConfigMaps(j.namespace).Get(ctx, j.name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			cm.ResourceVersion = ""
			cur, gerr = j.client.CoreV1().ConfigMaps(j.namespace).Create(ctx, cm, metav1.CreateOptions{})
			if gerr == nil {
				out, err = cur, nil
			}
		}
		if gerr != nil {
			return gerr
		}
		if err != nil {
			j.mu.Lock()
			j.rv = cur.ResourceVersion
			j.mu.Unlock()
			return err
		}
	}
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.rv = out.ResourceVersion
	j.size = len(data)
	if gen > j.flushedGen {
		j.flushedGen = gen
		close(j.flushed)
		j.flushed = make(chan struct{})
	}
	j.mu.Unlock()
	return nil
}
