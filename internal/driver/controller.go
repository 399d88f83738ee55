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

	// mu guards st and reserved. It is held while the document is saved, so every change
	// reaches the disk in the order it was made.
	mu sync.Mutex
	st *state.Controller
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

// commit persists the in-memory state after a change made under c.mu. If the document
// cannot be written, the change is dropped by reloading the last saved document, so memory
// never claims more than the disk.
func (c *controller) commitLocked() error {
	if err := c.file.Save(c.st); err != nil {
		if lerr := c.load(); lerr != nil {
			c.log.Error(lerr, "Reloading state after a failed save")
		}
		return status.Errorf(codes.Internal, "persist state: %v", err)
	}
	return nil
}

// lockVolume takes the in-flight lock of volume id, then the state lock, and finds the
// volume: NOT_FOUND if it is unknown. unlock releases both; changes to v are made under the
// state lock and persisted with commitLocked.
func (c *controller) lockVolume(id string) (v *state.Volume, unlock func(), err error) {
	release, err := c.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	unlock = func() { c.mu.Unlock(); release() }
	if v = c.st.Volumes[id]; v == nil {
		unlock()
		return nil, nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	return v, unlock, nil
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
			return err
		}
		for _, e := range entries {
			if !e.Partial && dir.recorded(e.ID) {
				continue
			}
			if !dir.mountable || e.Partial {
				c.log.Info("Removing data left by an interrupted operation", "path", e.Path)
				if err := backend.RemoveEntry(e); err != nil {
					return err
				}
				continue
			}
			if why, err := c.inUse(ctx, &state.Volume{ID: e.ID, Type: e.Type}); err != nil || why != "" {
				c.log.Info("Keeping unrecorded volume data because it is in use", "path", e.Path, "reason", why, "err", err)
				continue
			}
			c.log.Info("Removing data left by an interrupted operation", "path", e.Path)
			if err := backend.RemoveEntry(e); err != nil {
				return err
			}
		}
	}
	for id, v := range c.st.Volumes {
		if v.Deleting {
			// A DeleteVolume was interrupted: it had passed its checks, so finish it.
			c.log.Info("Finishing an interrupted DeleteVolume", "volumeID", id)
			if err := c.backends[v.Type].DeleteVolume(id); err != nil {
				return err
			}
			delete(c.st.Volumes, id)
			if err := c.commitLocked(); err != nil {
				return err
			}
			continue
		}
		if ok, err := c.backends[v.Type].VolumeExists(id); err == nil && !ok {
			c.log.Error(nil, "Volume data is missing", "volumeID", id, "path", c.backends[v.Type].VolumePath(id))
		}
	}
	c.log.Info("Controller state loaded", "volumes", len(c.st.Volumes), "snapshots", len(c.st.Snapshots))
	return nil
}

// catalogVolume serves the node's lookups in an all-in-one process.
func (c *controller) catalogVolume(id string) *state.Volume { return c.volume(id) }
