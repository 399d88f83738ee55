package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
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

	// mu guards st. A change is made under it and then joins the next group commit of
	// commits, after mu is released: changes reach the disk in the order they were made,
	// several to a write, and no call holds mu while an fsync runs.
	mu      sync.Mutex
	st      *state.Controller
	commits *state.Committer
	// pool is the space of the state directory; pool.mu is taken before mu by the calls
	// that take space. peer reports what the node's records hold (nil: no node).
	pool *pool
	peer func(typ string) []hold
	// modified applies a volume's new mutable parameters to its live publishes, when the
	// node service runs in this process; the caller holds the volume's in-flight lock.
	modified func(ctx context.Context, id string, mutable map[string]string) error
}

func controllerLayout(stateDir string) backend.Layout {
	return backend.Layout{Volumes: filepath.Join(stateDir, "volumes"), Snapshots: filepath.Join(stateDir, "snapshots")}
}

func newController(cfg *Config, log klog.Logger, locks *inflight, loops *backend.Loops, p *pool, cu *custody) (*controller, error) {
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
		pool:     p,
	}
	for _, t := range []string{state.TypeDir, state.TypeBlock} {
		b, err := backend.New(t, l)
		if err != nil {
			return nil, err
		}
		c.backends[t] = b
	}
	c.st = state.NewController()
	err := cu.open(record{
		file:  c.file,
		doc:   func() state.Document { return c.st },
		reset: func() { c.st = state.NewController() },
		data:  []string{l.Volumes, l.Snapshots},
	})
	if err != nil {
		return nil, err
	}
	c.st.Normalize()
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
		return status.Errorf(dataErrorCode(err), "persist state: %v", err)
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

// lockedVolume is a volume held by lockVolume: its in-flight lock and the state lock, and
// the pool's lock for a change that takes space.
type lockedVolume struct {
	*state.Volume
	c          *controller
	release    func()
	held, pool bool
}

// lockVolume takes the in-flight lock of volume id, then the state lock, and finds the
// volume: NOT_FOUND if it is unknown. Changes to it are made under the state lock and
// persisted with commit; unlock releases what commit has not.
func (c *controller) lockVolume(id string) (*lockedVolume, error) { return c.lockVolumeWith(id, false) }

// lockVolumeForRecord is lockVolume for a change of the volume's attach record alone, which
// runs beside the copies that read the volume (inflight).
func (c *controller) lockVolumeForRecord(id string) (*lockedVolume, error) {
	release, err := c.locks.hold(nil, []string{volumeKey(id)})
	if err != nil {
		return nil, err
	}
	return c.lockedState(id, release, false)
}

// lockVolumeForSpace is lockVolume for a change that takes space from the pool: the pool's
// lock is taken between the two, as by every call that takes space, and released before
// the commit waits for the disk.
func (c *controller) lockVolumeForSpace(id string) (*lockedVolume, error) {
	return c.lockVolumeWith(id, true)
}

func (c *controller) lockVolumeWith(id string, pool bool) (*lockedVolume, error) {
	release, err := c.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, err
	}
	return c.lockedState(id, release, pool)
}

// lockedState takes the state lock (and the pool's, if pool) for a volume whose in-flight
// lock release holds, and finds the volume.
func (c *controller) lockedState(id string, release func(), pool bool) (*lockedVolume, error) {
	if pool {
		c.pool.mu.Lock()
	}
	c.mu.Lock()
	l := &lockedVolume{Volume: c.st.Volumes[id], c: c, release: release, held: true, pool: pool}
	if l.Volume == nil || l.Volume.Creating {
		l.unlock()
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	return l, nil
}

// commit persists the changes and releases the state and pool locks; see commitUnlock.
func (l *lockedVolume) commit() error {
	l.held = false
	l.unlockPool()
	return l.c.commitUnlock()
}

func (l *lockedVolume) unlock() {
	if l.held {
		l.held = false
		l.c.mu.Unlock()
	}
	l.unlockPool()
	l.release()
}

func (l *lockedVolume) unlockPool() {
	if l.pool {
		l.pool = false
		l.c.pool.mu.Unlock()
	}
}

// volume returns a copy of a volume record, or nil. A volume still being created is not
// one yet.
func (c *controller) volume(id string) *state.Volume {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.st.Volumes[id]; ok && !v.Creating {
		return v.Clone()
	}
	return nil
}

// controllerHolds is what the controller's records of type typ hold in the pool: volumes
// their capacity (being created or not), "dir" snapshots what their copy occupies. A
// complete "block" snapshot is a copy whose bytes the host filesystem already counts; one
// being copied holds what the copy will take.
func controllerHolds(st *state.Controller, l backend.Layout, typ string) []hold {
	var out []hold
	b, _ := backend.New(typ, l)
	for _, v := range st.Volumes {
		if v.Type == typ {
			out = append(out, hold{bytes: v.CapacityBytes, image: b.VolumePath(v.ID)})
		}
	}
	for _, sn := range st.Snapshots {
		switch {
		case sn.Type != typ:
		case typ == state.TypeDir:
			out = append(out, hold{bytes: sn.UsedBytes})
		case sn.Creating:
			out = append(out, hold{bytes: sn.UsedBytes, image: b.SnapshotPath(sn.ID)})
		}
	}
	return out
}

// holds is what the controller's records hold, for the node's view of the pool.
func (c *controller) holds(typ string) []hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return controllerHolds(c.st, c.layout, typ)
}

// freeBytesLocked is what a new volume or snapshot of type typ may still use.
func (c *controller) freeBytesLocked(typ string) (int64, error) {
	return c.pool.free(typ, c.holdsWithPeerLocked(typ))
}

// fitsLocked is pool.fits for the controller; the caller holds pool.mu and c.mu.
func (c *controller) fitsLocked(typ string, size int64) error {
	return c.pool.fits(typ, size, c.holdsWithPeerLocked(typ))
}

// holdsWithPeerLocked is every hold of type typ: the controller's and the node's.
func (c *controller) holdsWithPeerLocked(typ string) []hold {
	all := controllerHolds(c.st, c.layout, typ)
	if c.peer != nil {
		all = append(all, c.peer(typ)...)
	}
	return all
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
	return mountedFrom(path, "")
}

// mountedFrom explains which mounts on this machine use the data at path (bind mounts of a
// "dir" volume) or the loop device dev that backs it, or "" when none does.
func mountedFrom(path, dev string) (string, error) {
	mt, err := readMountTable()
	if err != nil {
		return "", err
	}
	if binds := mt.bindsOf(path); len(binds) > 0 {
		return fmt.Sprintf("it is mounted at %v", binds), nil
	}
	if dev == "" {
		return "", nil
	}
	if mps := append(mt.mountsOfDevice(dev), mt.bindsOf(dev)...); len(mps) > 0 {
		return fmt.Sprintf("its loop device %s is mounted at %v", dev, mps), nil
	}
	return "", nil
}

// removeUnused removes a volume that a record says was abandoned (an interrupted create
// or delete) unless something on this machine uses its data: a record restored from a
// backup may call creating a volume that has since been created and mounted.
func (c *controller) removeUnused(ctx context.Context, v *state.Volume) error {
	why, err := c.inUse(ctx, v)
	if err != nil {
		return status.Errorf(codes.Internal, "check whether volume %s is in use: %v", v.ID, err)
	}
	if why != "" {
		return status.Errorf(codes.FailedPrecondition, "volume %s is recorded as abandoned but %s: kept; check the record (docs/driver.md)", v.ID, why)
	}
	return c.finishDelete(v.ID, v.Type)
}

func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

// reconcile compares the records with the disk after a start. What a record's intent names
// is finished: a creation interrupted by a crash is rolled back, a deletion completed. Data
// that no record names is quarantined, never deleted: it may be a volume whose record was
// lost. Records whose bytes are gone are reported, and their health says so.
func (c *controller) reconcile(ctx context.Context) error {
	if err := c.file.RemoveTemps(); err != nil {
		return err
	}
	if err := c.sweep(ctx); err != nil {
		return err
	}
	if err := c.reconcileGroups(); err != nil {
		return err
	}
	c.mu.Lock()
	var creating, deleting []*state.Volume
	var snapshots []state.Snapshot
	for _, v := range c.st.Volumes {
		switch {
		case v.Creating:
			creating = append(creating, v.Clone())
		case v.Deleting:
			deleting = append(deleting, v.Clone())
		default:
			if ok, err := c.backends[v.Type].VolumeExists(v.ID); err == nil && !ok {
				c.log.Error(nil, "Volume data is missing", "volumeID", v.ID, "path", c.backends[v.Type].VolumePath(v.ID))
			}
		}
	}
	for _, sn := range c.st.Snapshots {
		if sn.Creating {
			snapshots = append(snapshots, *sn)
		}
	}
	c.mu.Unlock()
	for _, v := range append(creating, deleting...) {
		// A creation rolled back, or a DeleteVolume, which had passed its checks, finished.
		c.log.Info("Finishing an interrupted operation", "volumeID", v.ID, "name", v.Name, "creating", v.Creating, "deleting", v.Deleting)
		if err := c.removeUnused(ctx, v); status.Code(err) == codes.FailedPrecondition {
			c.log.Error(err, "Keeping a volume its record calls abandoned", "volumeID", v.ID)
		} else if err != nil {
			return err
		}
	}
	for _, sn := range snapshots {
		c.log.Info("Rolling back an interrupted CreateSnapshot", "snapshotID", sn.ID, "name", sn.Name)
		if err := c.removeSnapshot(sn.ID, sn.Type); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log.Info("Controller state loaded", "volumes", len(c.st.Volumes), "snapshots", len(c.st.Snapshots))
	return nil
}

// sweep handles the data on disk that is not a complete recorded volume or snapshot: the
// partial copy of one being created is removed (its intent names it); anything else is
// quarantined, unless it is in use, when it is left where it is and reported.
func (c *controller) sweep(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, dir := range []struct {
		path, area string
		record     func(string) (exists, creating bool)
	}{
		{c.layout.Volumes, "volumes", func(id string) (bool, bool) { v := c.st.Volumes[id]; return v != nil, v != nil && v.Creating }},
		{c.layout.Snapshots, "snapshots", func(id string) (bool, bool) { sn := c.st.Snapshots[id]; return sn != nil, sn != nil && sn.Creating }},
	} {
		entries, err := backend.Scan(dir.path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			exists, creating := dir.record(e.ID)
			switch {
			case creating && e.Partial:
				c.log.Info("Removing the partial copy of an interrupted creation", "path", e.Path)
				if err := backend.RemoveEntry(e); err != nil {
					return err
				}
			case exists && !e.Partial:
			default:
				if dir.area == "volumes" && !e.Partial {
					if why, err := c.inUse(ctx, &state.Volume{ID: e.ID, Type: e.Type}); err != nil || why != "" {
						c.log.Info("Leaving unrecorded volume data in place because it is in use", "path", e.Path, "reason", why, "err", err)
						continue
					}
				}
				if err := quarantine(c.log, c.cfg.StateDir, dir.area, e); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// catalogVolume serves the node's lookups in an all-in-one process.
func (c *controller) catalogVolume(id string) *state.Volume { return c.volume(id) }
