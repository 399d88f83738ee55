package driver

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inflight remembers which volumes, snapshots and names have an operation running. CSI
// ("Concurrency"): the CO keeps one call in flight per volume, but after a CO restart it may
// send parallel calls, and the plugin answers ABORTED to the later ones.
type inflight struct {
	mu   sync.Mutex
	busy map[string]struct{}
}

func newInflight() *inflight { return &inflight{busy: map[string]struct{}{}} }

// acquire takes every key or none. The returned release must be called once.
func (f *inflight) acquire(keys ...string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if _, ok := f.busy[k]; ok {
			return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", k)
		}
	}
	for _, k := range keys {
		f.busy[k] = struct{}{}
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range keys {
			delete(f.busy, k)
		}
	}, nil
}

// Lock keys. Volume operations of the controller and of the node share one key space, so a
// DeleteVolume racing a NodeStageVolume of the same volume is refused too.
func volumeKey(id string) string       { return "volume " + id }
func volumeNameKey(name string) string { return "volume name " + name }
func snapshotKey(id string) string     { return "snapshot " + id }
func snapshotNameKey(n string) string  { return "snapshot name " + n }
func groupKey(id string) string        { return "group snapshot " + id }
func groupNameKey(n string) string     { return "group snapshot name " + n }
