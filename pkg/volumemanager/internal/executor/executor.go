// Package executor runs the volume manager's operations: at most one per volume (or per
// volume and pod), with exponential backoff per key and operation after a failure
// (upstream: nestedpendingoperations and exponentialbackoff).
package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// Backoff bounds, upstream's exponentialbackoff: 500 ms doubling to 2m2s.
const (
	InitialBackoff = 500 * time.Millisecond
	MaxBackoff     = 2*time.Minute + 2*time.Second
)

// OpKey identifies what an operation works on. An empty Pod is a wildcard that conflicts
// with every operation on the volume: device-mountable volumes (one global mount) use it,
// so all their operations are serialized; other volumes are per pod.
type OpKey struct {
	Volume v1.UniqueVolumeName
	Pod    types.UID
}

// ErrPending is returned by Run when a conflicting operation is still running.
var ErrPending = errors.New("an operation on the volume is already in progress")

// BackoffError is returned by Run while the key's last failure backs it off.
type BackoffError struct {
	Op    string
	Until time.Time
}

// Error says which operation backs off until when.
func (e *BackoffError) Error() string {
	return fmt.Sprintf("operation %s backing off until %s", e.Op, e.Until.Format(time.RFC3339Nano))
}

type backoff struct {
	op    string
	delay time.Duration
	until time.Time
}

// Executor runs volume operations in goroutines, at most one per key, with exponential
// backoff per key and operation after a failure (upstream: nestedpendingoperations). A
// different operation on the key resets its backoff, as upstream, so an unmount is never
// held back by a failing mount.
type Executor struct {
	timeout      time.Duration
	sem          chan struct{}
	observe      func(Operation, error, time.Duration)
	maxForbidden time.Duration
	now          func() time.Time

	mu      sync.Mutex
	pending map[v1.UniqueVolumeName]map[types.UID]string // volume → pod ("" for all) → operation
	forPod  map[types.UID]int                            // running operations on behalf of each pod
	backoff map[OpKey]*backoff
	wg      sync.WaitGroup
}

// Config configures an Executor.
type Config struct {
	// Timeout bounds each operation.
	Timeout time.Duration
	// Parallelism bounds the operations running at once (the rest wait, still counted as
	// pending); at least 1.
	Parallelism int
	// MaxForbiddenBackoff caps the backoff after an operation the API server refused
	// (Forbidden): a node is refused a pod's objects only until the API server's node
	// graph has the pod, a lag of seconds that upstream's doubling would turn into minutes.
	MaxForbiddenBackoff time.Duration
	// Observe, if set, is called with each finished operation's result and duration
	// (storage_operation_duration_seconds).
	Observe func(op Operation, err error, d time.Duration)
}

// New returns an executor.
func New(cfg Config) *Executor {
	if cfg.Parallelism < 1 {
		cfg.Parallelism = 1
	}
	if cfg.MaxForbiddenBackoff == 0 {
		cfg.MaxForbiddenBackoff = MaxBackoff
	}
	return &Executor{
		timeout: cfg.Timeout, sem: make(chan struct{}, cfg.Parallelism), observe: cfg.Observe,
		maxForbidden: cfg.MaxForbiddenBackoff, now: time.Now,
		pending: map[v1.UniqueVolumeName]map[types.UID]string{}, forPod: map[types.UID]int{}, backoff: map[OpKey]*backoff{},
	}
}

// Operation is one unit of work.
type Operation struct {
	Key OpKey
	// Pod the operation works for, when the key does not say (a device-mountable volume's
	// mount): a pod is not torn down while an operation for it runs.
	Pod        types.UID
	Name       string // upstream operation_name: volume_mount, volume_unmount, unmount_device, ...
	PluginName string
	// Migrated: the volume is an in-tree volume mounted through its CSI translation (the
	// metrics' migrated label).
	Migrated bool
	Run      func(ctx context.Context) error
	// Done is called with Run's result after the executor's bookkeeping, outside its lock.
	Done func(err error)
}

// Run starts op unless a conflicting operation is pending (ErrPending) or the key is backing
// off after a failure of the same operation (*BackoffError). A timeout of the operation's
// context is reported to Run as an uncertain error.
func (e *Executor) Run(ctx context.Context, op Operation) error {
	e.mu.Lock()
	if e.pendingLocked(op.Key) {
		e.mu.Unlock()
		return ErrPending
	}
	if b := e.backoff[op.Key]; b != nil {
		if b.op != op.Name {
			delete(e.backoff, op.Key)
		} else if now := e.now(); now.Before(b.until) {
			e.mu.Unlock()
			return &BackoffError{Op: op.Name, Until: b.until}
		}
	}
	if e.pending[op.Key.Volume] == nil {
		e.pending[op.Key.Volume] = map[types.UID]string{}
	}
	e.pending[op.Key.Volume][op.Key.Pod] = op.Name
	if op.Pod == "" {
		op.Pod = op.Key.Pod
	}
	if op.Pod != "" {
		e.forPod[op.Pod]++
	}
	e.wg.Add(1)
	e.mu.Unlock()

	go func() {
		defer e.wg.Done()
		err := e.execute(ctx, op)
		e.mu.Lock()
		delete(e.pending[op.Key.Volume], op.Key.Pod)
		if len(e.pending[op.Key.Volume]) == 0 {
			delete(e.pending, op.Key.Volume)
		}
		if op.Pod != "" {
			if e.forPod[op.Pod]--; e.forPod[op.Pod] <= 0 {
				delete(e.forPod, op.Pod)
			}
		}
		if err != nil && !volume.IsTransient(err) {
			b := e.backoff[op.Key]
			if b == nil || b.op != op.Name {
				b = &backoff{op: op.Name}
				e.backoff[op.Key] = b
			}
			switch {
			case b.delay == 0:
				b.delay = InitialBackoff
			case b.delay < MaxBackoff:
				b.delay = min(2*b.delay, MaxBackoff)
			}
			if apierrors.IsForbidden(err) {
				// A node is refused a pod's object (a CSI secret, a service account
				// token) until the API server's node graph has the pod: a lag of
				// seconds, which upstream's doubling would turn into minutes.
				b.delay = min(b.delay, e.maxForbidden)
			}
			b.until = e.now().Add(b.delay)
		} else if err == nil {
			delete(e.backoff, op.Key)
		}
		e.mu.Unlock()
		if op.Done != nil {
			op.Done(err)
		}
	}()
	return nil
}

func (e *Executor) execute(ctx context.Context, op Operation) (err error) {
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return volume.NewTransientError(ctx.Err())
	}
	defer func() { <-e.sem }()
	opCtx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("operation %s panicked: %v", op.Name, r)
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) && !volume.IsUncertain(err) {
			err = volume.NewUncertainError(err)
		}
		if e.observe != nil {
			e.observe(op, err, time.Since(start))
		}
	}()
	return op.Run(opCtx)
}

// Pending reports whether an operation conflicting with key is running.
func (e *Executor) Pending(key OpKey) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pendingLocked(key)
}

// PodBusy reports whether an operation for the pod is running.
func (e *Executor) PodBusy(pod types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.forPod[pod] > 0
}

// pendingLocked: an empty pod conflicts with every operation on the volume.
func (e *Executor) pendingLocked(key OpKey) bool {
	pods := e.pending[key.Volume]
	if len(pods) == 0 {
		return false
	}
	if key.Pod == "" {
		return true
	}
	_, all := pods[""]
	_, same := pods[key.Pod]
	return all || same
}

// ResetBackoff forgets the backoff of every key of the pod, so an operation that waited for
// an object (a ConfigMap that did not exist yet) runs as soon as the object appears.
func (e *Executor) ResetBackoff(pod types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.backoff {
		if k.Pod == pod {
			delete(e.backoff, k)
		}
	}
}

// Wait blocks until every started operation has finished.
func (e *Executor) Wait() { e.wg.Wait() }
