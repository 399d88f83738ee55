package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/driver/backend"
	"github.com/kubevol/kubevol/internal/driver/state"
)

// controller serves the CSI Controller service. It owns controller.json: the volumes and
// snapshots it created and where they are published.
type controller struct {
	csi.UnimplementedControllerServer

	cfg      *Config
	log      klog.Logger
	file     *state.File
	layout   backend.Layout
	backends map[string]backend.Backend
	loops    *backend.Loops
	locks    *inflight

	// mu guards st and reserved. A change is made under it and then joins the next group
	// commit of commits, after mu is released: changes reach the disk in the order they
	// were made, several to a write, and no call holds mu while an fsync runs.
	mu      sync.Mutex
	st      *state.Controller
	commits *state.Committer
	// reserved is capacity promised to CreateVolume and CreateSnapshot calls that are still
	// copying, by backend type, so that concurrent calls cannot overbook the pool.
	reserved map[string]int64
}

func controllerLayout(stateDir string) backend.Layout {
	return backend.Layout{Volumes: filepath.Join(stateDir, "volumes"), Snapshots: filepath.Join(stateDir, "snapshots")}
}

func newController(cfg *Config, log klog.Logger, locks *inflight, loops *backend.Loops) (*controller, error) {
	l := controllerLayout(cfg.StateDir)
	if err := l.MkdirAll(); err != nil {
		return nil, err
	}
	c := &controller{
		cfg:      cfg,
		log:      log.WithName("controller"),
		file:     state.NewFile(filepath.Join(cfg.StateDir, "controller.json")),
		layout:   l,
		backends: map[string]backend.Backend{},
		loops:    loops,
		locks:    locks,
		reserved: map[string]int64{},
	}
	for _, t := range []string{state.TypeDir, state.TypeBlock} {
		b, err := backend.New(t, l)
		if err != nil {
			return nil, err
		}
		c.backends[t] = b
	}
	if err := c.load(); err != nil {
		return nil, err
	}
	c.commits = state.NewCommitter(c.file, &c.mu, func() any { return c.st }, dropUnsaved(c.log, c.file, c.load))
	return c, nil
}

func (c *controller) load() error {
	st := state.NewController()
	if _, err := c.file.Load(st); err != nil {
		return err
	}
	st.Normalize()
	c.st = st
	return nil
}

// commitUnlock persists the changes made under c.mu: they join the next group commit, c.mu
// is released, and it returns once they are durable. The caller keeps the in-flight locks
// of what it changed until then, so no other call on them acts on a change not yet on disk.
func (c *controller) commitUnlock() error {
	if err := c.commits.Commit(); err != nil {
		return status.Errorf(storageCode(err), "persist state: %v", err)
	}
	return nil
}

// readDurable runs read under c.mu and returns once all that read may have seen is durable.
// The calls that list or get records use it: a change is visible in memory from the moment
// it is made, and before group commit no answer could show one that a crash would undo.
func (c *controller) readDurable(read func() error) error {
	c.mu.Lock()
	if err := read(); err != nil {
		c.mu.Unlock()
		return err
	}
	if err := c.commits.Barrier(); err != nil {
		return status.Errorf(codes.Unavailable, "records changed while being read could not be persisted: %v", err)
	}
	return nil
}

// lockedVolume is a volume held by lockVolume: its in-flight lock and the state lock.
type lockedVolume struct {
	*state.Volume
	c       *controller
	release func()
	held    bool
}

// lockVolume takes the in-flight lock of volume id, then the state lock, and finds the
// volume: NOT_FOUND if it is unknown. Changes to it are made under the state lock and
// persisted with commit; unlock releases what commit has not.
func (c *controller) lockVolume(id string) (*lockedVolume, error) {
	release, err := c.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	l := &lockedVolume{Volume: c.st.Volumes[id], c: c, release: release, held: true}
	if l.Volume == nil {
		l.unlock()
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	return l, nil
}

// commit persists the changes and releases the state lock; see commitUnlock.
func (l *lockedVolume) commit() error {
	l.held = false
	return l.c.commitUnlock()
}

func (l *lockedVolume) unlock() {
	if l.held {
		l.held = false
		l.c.mu.Unlock()
	}
	l.release()
}

// volume returns a copy of a volume record, or nil.
func (c *controller) volume(id string) *state.Volume {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.st.Volumes[id]; ok {
		return v.Clone()
	}
	return nil
}

// freeBytesLocked is what a new volume or snapshot of type typ may still use.
//   - dir: the configured pool, minus what volumes and snapshots hold and what in-flight
//     creates reserved.
//   - block: real space. Images are sparse, so the free space of the host filesystem is
//     reduced by what the existing images may still grow into; the pool never overcommits.
func (c *controller) freeBytesLocked(typ string) (int64, error) {
	if typ == state.TypeDir {
		return max(0, c.cfg.Capacity-c.st.UsedBytes(state.TypeDir)-c.reserved[typ]), nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(c.layout.Volumes, &fs); err != nil {
		return 0, err
	}
	free := int64(fs.Bavail) * fs.Bsize
	b := c.backends[state.TypeBlock]
	for _, v := range c.st.Volumes {
		if v.Type != state.TypeBlock {
			continue
		}
		alloc, err := backend.AllocatedBytes(b.VolumePath(v.ID))
		if err != nil {
			continue // a missing image is reported by health, not here
		}
		free -= max(0, v.CapacityBytes-alloc)
	}
	return max(0, free-c.reserved[typ]), nil
}

// reserve books size bytes of type typ, or fails with RESOURCE_EXHAUSTED.
func (c *controller) reserveLocked(typ string, size int64) error {
	free, err := c.freeBytesLocked(typ)
	if err != nil {
		return status.Errorf(codes.Internal, "capacity: %v", err)
	}
	if size > free {
		return status.Errorf(codes.ResourceExhausted, "not enough space in the %s pool: %d bytes requested, %d available", typ, size, free)
	}
	c.reserved[typ] += size
	return nil
}

func (c *controller) unreserve(typ string, size int64) {
	c.mu.Lock()
	c.reserved[typ] -= size
	c.mu.Unlock()
}

// inUse explains why the bytes of a volume are still in use on this machine, or "".
// DeleteVolume refuses such a volume (FAILED_PRECONDITION) rather than pull the data from
// under a mount.
func (c *controller) inUse(ctx context.Context, v *state.Volume) (string, error) {
	path := c.backends[v.Type].VolumePath(v.ID)
	if v.Type == state.TypeBlock {
		dev, err := c.loops.Find(ctx, path)
		if err != nil {
			return "", err
		}
		if dev != "" {
			return fmt.Sprintf("its image is attached as %s", dev), nil
		}
		return "", nil
	}
	mt, err := readMountTable()
	if err != nil {
		return "", err
	}
	if binds := mt.bindsOf(path); len(binds) > 0 {
		return fmt.Sprintf("it is mounted at %v", binds), nil
	}
	return "", nil
}

func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

// reconcile compares the records with the disk after a start: copies interrupted by a crash
// and volumes created but never recorded (killed between the two) are removed, so nothing
// leaks; records whose bytes are gone are reported, and their health says so.
func (c *controller) reconcile(ctx context.Context) error {
	if err := c.file.RemoveTemps(); err != nil {
		return err
	}
	deleting, err := c.removeUnrecorded(ctx)
	if err != nil {
		return err
	}
	for _, v := range deleting {
		// A DeleteVolume was interrupted: it had passed its checks, so finish it.
		c.log.Info("Finishing an interrupted DeleteVolume", "volumeID", v.ID)
		if err := c.finishDelete(v.ID, v.Type); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log.Info("Controller state loaded", "volumes", len(c.st.Volumes), "snapshots", len(c.st.Snapshots))
	return nil
}

// removeUnrecorded removes the data no record explains, reports records whose data is
// missing, and returns the volumes whose deletion was interrupted.
func (c *controller) removeUnrecorded(ctx context.Context) (deleting []*state.Volume, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, dir := range []struct {
		path      string
		recorded  func(string) bool
		mountable bool
	}{
		{c.layout.Volumes, func(id string) bool { _, ok := c.st.Volumes[id]; return ok }, true},
		{c.layout.Snapshots, func(id string) bool { _, ok := c.st.Snapshots[id]; return ok }, false},
	} {
		entries, err := backend.Scan(dir.path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.Partial && dir.recorded(e.ID) {
				continue
			}
			if dir.mountable && !e.Partial {
				if why, err := c.inUse(ctx, &state.Volume{ID: e.ID, Type: e.Type}); err != nil || why != "" {
					c.log.Info("Keeping unrecorded volume data because it is in use", "path", e.Path, "reason", why, "err", err)
					continue
				}
			}
			c.log.Info("Removing data left by an interrupted operation", "path", e.Path)
			if err := backend.RemoveEntry(e); err != nil {
				return nil, err
			}
		}
	}
	for id, v := range c.st.Volumes {
		if v.Deleting {
			deleting = append(deleting, v.Clone())
			continue
		}
		if ok, err := c.backends[v.Type].VolumeExists(id); err == nil && !ok {
			c.log.Error(nil, "Volume data is missing", "volumeID", id, "path", c.backends[v.Type].VolumePath(id))
		}
	}
	return deleting, nil
}

// catalogVolume serves the node's lookups in an all-in-one process.
func (c *controller) catalogVolume(id string) *state.Volume { return c.volume(id) }
