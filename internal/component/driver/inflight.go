package driver

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inflight remembers which volumes, snapshots and names have an operation running. CSI
// ("Concurrency"): the CO keeps one call in flight per volume, but after a CO restart it may
// send parallel calls, and the plugin answers ABORTED to the later ones.
//
// A key is held exclusively, or shared by operations that may run beside each other: the
// copies that read a volume (a clone, a snapshot) and the attach records of it
// (ControllerPublishVolume and ControllerUnpublishVolume) neither change its bytes nor
// depend on each other. A detach refused because a clone was reading the volume fails the
// attach/detach controller's detach, which then waits two minutes on the VolumeAttachment
// being deleted for an attach that never comes (upstream csiAttacher.Attach finds the old
// object and waits for it to turn attached).
type inflight struct {
	mu sync.Mutex
	// busy is -1 for a key held exclusively, else how many operations share it.
	busy map[string]int
}

func newInflight() *inflight { return &inflight{busy: map[string]int{}} }

// acquire takes every key exclusively, or none. The returned release must be called once.
func (f *inflight) acquire(keys ...string) (release func(), err error) {
	return f.hold(keys, nil)
}

// hold takes the exclusive keys and shares the shared ones, or takes nothing: an exclusive
// key conflicts with any holder, a shared one with an exclusive holder only.
func (f *inflight) hold(exclusive, shared []string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range exclusive {
		if f.busy[k] != 0 {
			return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", k)
		}
	}
	for _, k := range shared {
		if f.busy[k] < 0 {
			return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", k)
		}
	}
	for _, k := range exclusive {
		f.busy[k] = -1
	}
	for _, k := range shared {
		f.busy[k]++
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range exclusive {
			delete(f.busy, k)
		}
		for _, k := range shared {
			if f.busy[k]--; f.busy[k] <= 0 {
				delete(f.busy, k)
			}
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
