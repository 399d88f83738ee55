package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// node serves the CSI Node service. It owns node.json: what it staged and published, and the
// inline ephemeral volumes it created.
type node struct {
	csi.UnimplementedNodeServer

	cfg *Config
	log klog.Logger
	// file is node.json.
	file *state.File
	// layout is where the controller keeps volumes; ephLayout is the node's own area for
	// ephemeral volumes, apart so that neither side's restart cleanup touches the other's.
	layout    backend.Layout
	ephLayout backend.Layout
	// catalog returns the controller's record of a volume (capacity, fsType), or nil.
	catalog func(id string) *state.Volume
	loops   *backend.Loops
	mounter *mount.SafeFormatAndMount
	resizer *mount.ResizeFs
	locks   *inflight

	// controllerVolumes, in a node process without the controller, reads the controller's
	// records, which the caller must not change: followModifications reads them each round.
	controllerVolumes func() map[string]*state.Volume

	// mu guards st; changes are persisted with update, in group commits (see controller.mu).
	mu      sync.Mutex
	st      *state.Node
	commits *state.Committer
	// pool is the space of the state directory, which inline ephemeral volumes share with
	// the controller's; peer reports what the controller's records hold.
	pool *pool
	peer func(typ string) []hold
	// grow is the controller's expansion, set when the node expands volumes on its own
	// (--without controller-expansion).
	grow func(ctx context.Context, id string, rng *csi.CapacityRange, vc *csi.VolumeCapability) (int64, bool, error)
}

// ephemeralLayout is the node's own area for inline ephemeral volumes.
func ephemeralLayout(stateDir string) backend.Layout {
	return backend.Layout{Volumes: filepath.Join(stateDir, "ephemeral"), Snapshots: filepath.Join(stateDir, "ephemeral")}
}

func newNode(cfg *Config, log klog.Logger, locks *inflight, loops *backend.Loops, catalog func(string) *state.Volume, p *pool, cu *custody) (*node, error) {
	n := &node{
		cfg:       cfg,
		log:       log.WithName("node"),
		file:      state.NewFile(filepath.Join(cfg.StateDir, "node.json")),
		layout:    controllerLayout(cfg.ControllerStateDir),
		ephLayout: ephemeralLayout(cfg.StateDir),
		catalog:   catalog,
		loops:     loops,
		mounter:   mount.NewSafeFormatAndMount(mount.NewWithoutSystemd(""), utilexec.New()),
		resizer:   mount.NewResizeFs(utilexec.New()),
		locks:     locks,
		pool:      p,
	}
	if err := n.ephLayout.MkdirAll(); err != nil {
		return nil, err
	}
	if err := n.layout.MkdirAll(); err != nil {
		return nil, err
	}
	n.st = state.NewNode()
	err := cu.open(record{
		file:  n.file,
		doc:   func() state.Document { return n.st },
		reset: func() { n.st = state.NewNode() },
		data:  []string{n.ephLayout.Volumes},
	})
	if err != nil {
		return nil, err
	}
	n.st.Normalize()
	n.commits = state.NewCommitter(n.file, &n.mu, func() any { return n.st }, dropUnsaved(n.log, n.file, n.load))
	return n, nil
}

func (n *node) load() error {
	st := state.NewNode()
	if _, err := n.file.Load(st); err != nil {
		return err
	}
	st.Normalize()
	n.st = st
	return nil
}

// update applies a change to the node state and returns once it is durable; if it cannot
// be persisted the change is dropped, so memory never claims more than the disk.
func (n *node) update(change func(st *state.Node)) error {
	n.mu.Lock()
	change(n.st)
	return n.commitUnlock()
}

// putStage and putPublish record a copy of the record: the caller goes on filling in its own
// (the device, the phase) while other calls copy the recorded one under n.mu and the state
// file marshals it.
func (n *node) putStage(s *state.Stage) error {
	c := *s
	return n.update(func(st *state.Node) { st.Stages[c.VolumeID] = &c })
}

func (n *node) putPublish(p *state.Publish) error {
	c := *p
	return n.update(func(st *state.Node) { st.Publishes[c.TargetPath] = &c })
}

// commitUnlock persists the changes made under n.mu, releases it, and returns once they
// are durable (see controller.commitUnlock).
func (n *node) commitUnlock() error {
	if err := n.commits.Commit(); err != nil {
		return status.Errorf(dataErrorCode(err), "persist node state: %v", err)
	}
	return nil
}

// dropUnsaved is the rollback of a state document after a failed write: every change not on
// disk, of the failed batch and of the next, is dropped by reloading the last saved
// document, so memory never claims more than the disk. The calls that made them all fail.
func dropUnsaved(log klog.Logger, file *state.File, load func() error) func(error) {
	return func(err error) {
		log.Error(err, "Persisting state failed, dropping the changes not on disk", "path", file.Path())
		if lerr := load(); lerr != nil {
			log.Error(lerr, "Reloading state after a failed save", "path", file.Path())
		}
	}
}

// view runs read under the state lock and returns copies of what it needs.
func (n *node) stage(id string) *state.Stage {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.st.Stages[id]; ok {
		c := *s
		return &c
	}
	return nil
}

func (n *node) publish(target string) *state.Publish {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p, ok := n.st.Publishes[target]; ok {
		c := *p
		return &c
	}
	return nil
}

func (n *node) publishesOf(id string) []state.Publish {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []state.Publish
	for _, p := range n.st.PublishesOf(id) {
		out = append(out, *p)
	}
	return out
}

// lockVolume takes the in-flight lock of volume id and resolves it. release must be called
// once when err is nil.
func (n *node) lockVolume(id string) (ref *volumeRef, release func(), err error) {
	release, err = n.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, nil, err
	}
	if ref, err = n.resolve(id); err != nil {
		release()
		return nil, nil, err
	}
	return ref, release, nil
}

// lockCapable is lockVolume for NodeStageVolume and NodePublishVolume, which also check
// that the volume's type can serve the capability: CSI answers FAILED_PRECONDITION for one
// it cannot (an access type or mode the volume does not support).
func (n *node) lockCapable(id string, vc *csi.VolumeCapability) (ref *volumeRef, release func(), err error) {
	if ref, release, err = n.lockVolume(id); err != nil {
		return nil, nil, err
	}
	if r := n.cfg.off.unsupported(ref.typ, ref.network, vc); r != "" {
		release()
		return nil, nil, status.Error(codes.FailedPrecondition, r)
	}
	return ref, release, nil
}

// volumeRef is what the node knows of a volume: its type and where its bytes are.
type volumeRef struct {
	id        string
	typ       string
	path      string
	capacity  int64
	fsType    string
	ephemeral bool
	// network: the volume is reachable from every node (placement "network").
	network bool
}

// resolve finds a volume. The disk decides whether it exists; the controller's record, when
// this node can read it, adds the capacity and the filesystem type.
func (n *node) resolve(id string) (*volumeRef, error) {
	n.mu.Lock()
	eph := n.st.Ephemeral[id]
	n.mu.Unlock()
	if eph != nil {
		b, _ := backend.New(eph.Type, n.ephLayout)
		return &volumeRef{id: id, typ: eph.Type, path: b.VolumePath(id), capacity: eph.CapacityBytes, fsType: eph.FsType, ephemeral: true}, nil
	}
	typ, err := backend.Probe(n.layout, id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "look up volume %s: %v", id, err)
	}
	if typ == "" {
		return nil, status.Errorf(codes.NotFound, "volume %s not found on node %q", id, n.cfg.NodeID)
	}
	b, _ := backend.New(typ, n.layout)
	ref := &volumeRef{id: id, typ: typ, path: b.VolumePath(id)}
	if v := n.catalog(id); v != nil {
		// A controller of several nodes keeps all their volumes in one place; each is
		// local to the node it was provisioned on, unless it is a network volume.
		if !v.Network && v.Node != "" && v.Node != n.cfg.NodeID {
			return nil, status.Errorf(codes.NotFound, "volume %s is on node %q, not on node %q", id, v.Node, n.cfg.NodeID)
		}
		ref.capacity, ref.fsType, ref.network = v.CapacityBytes, v.FsType, v.Network
	}
	if typ == state.TypeBlock {
		if fi, err := os.Stat(ref.path); err == nil {
			ref.capacity = fi.Size() // the image's length is the device's size
		}
	}
	return ref, nil
}

func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	limit := n.cfg.MaxVolumesPerNode
	if f := n.cfg.MaxVolumesPerNodeFile; f != "" {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "read --max-volumes-per-node-file: %v", err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil || v < 0 {
			return nil, status.Errorf(codes.Internal, "--max-volumes-per-node-file %s: want a count, got %q", f, strings.TrimSpace(string(raw)))
		}
		limit = v
	}
	return &csi.NodeGetInfoResponse{
		NodeId:             n.cfg.NodeID,
		MaxVolumesPerNode:  limit,
		AccessibleTopology: &csi.Topology{Segments: n.cfg.topology()},
	}, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range n.cfg.nodeCapabilities() {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

// fsTypeOf picks the filesystem of a block volume: the capability's fs_type, else the
// StorageClass parameter recorded at creation, else ext4.
func fsTypeOf(c *csi.VolumeCapability, recorded string) string {
	if fs := c.GetMount().GetFsType(); fs != "" {
		return fs
	}
	if recorded != "" {
		return recorded
	}
	return defaultFsType
}

// isMounted reports whether something is mounted at p.
func isMounted(p string) (bool, error) {
	mt, err := readMountTable()
	if err != nil {
		return false, err
	}
	return mt.at(p) != nil, nil
}

// unmountAll removes every mount stacked at p.
func (n *node) unmountAll(p string) error {
	for {
		mounted, err := isMounted(p)
		if err != nil || !mounted {
			return err
		}
		if err := n.mounter.Unmount(p); err != nil {
			return err
		}
	}
}

var errNotRecorded = errors.New("not recorded")
