package driver

import (
	"errors"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
	"github.com/kubevol/kubevol/internal/runtime/filelock"
)

// A network "block" volume (placement "network") is one image that every node instance of
// the machine may stage. Loop devices are the machine's, not a node's: the first node to
// stage the image attaches it, the others use that device, and only the last one to unstage
// detaches it. A filesystem on it is mounted by one node at a time, as a network disk's
// ext4 or xfs would be (neither is a cluster filesystem). The node instances are separate
// processes, so who holds the image is a persisted record beside the controller's volumes,
// changed under an exclusive lock on the volume's lock file: the explicit, on-disk
// coordination of node instances that CSI's hostpath driver keeps in its state file.

// networkHolders is the record of one network block volume's stages, by node ID.
type networkHolders struct {
	// Nodes maps each node that staged the volume to whether it mounted a filesystem
	// (true) or uses the raw device (false).
	Nodes map[string]bool `json:"nodes"`
}

func (n *node) networkDir() string { return filepath.Join(n.cfg.ControllerStateDir, "network") }

// withHolders runs change on the volume's record under the lock every node instance takes,
// and persists what change leaves (removing an empty record). change's error aborts it.
func (n *node) withHolders(id string, change func(h *networkHolders) error) error {
	dir := n.networkDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return filelock.With(filepath.Join(dir, id+".lock"), 0o600, func() error {
		f := state.NewFile(filepath.Join(dir, id+".json"))
		h := networkHolders{Nodes: map[string]bool{}}
		if _, err := f.Load(&h); err != nil {
			return err
		}
		if h.Nodes == nil {
			h.Nodes = map[string]bool{}
		}
		if err := change(&h); err != nil {
			return err
		}
		if len(h.Nodes) == 0 {
			if err := os.Remove(f.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}
		return f.Save(&h)
	})
}

// holdNetwork records this node's stage of a network block volume before it uses the image,
// then runs use under the record's lock (attaching or finding the shared loop device).
// Another node's filesystem, or a filesystem wanted beside another node's stage, is
// FAILED_PRECONDITION: the volume is in use elsewhere.
func (n *node) holdNetwork(ref *volumeRef, fs bool, use func() error) error {
	return n.withHolders(ref.id, func(h *networkHolders) error {
		for node, otherFS := range h.Nodes {
			if node != n.cfg.NodeID && (fs || otherFS) {
				return status.Errorf(codes.FailedPrecondition, "volume %s is staged on node %q: a filesystem on a network %q volume is mounted by one node at a time", ref.id, node, state.TypeBlock)
			}
		}
		h.Nodes[n.cfg.NodeID] = fs
		return use()
	})
}

// releaseNetwork drops this node's stage of a network block volume; detach runs, under the
// record's lock, only when no other node still holds the image.
func (n *node) releaseNetwork(id string, detach func() error) error {
	return n.withHolders(id, func(h *networkHolders) error {
		delete(h.Nodes, n.cfg.NodeID)
		if len(h.Nodes) > 0 {
			return nil
		}
		return detach()
	})
}

// sharedImage reports whether ref is a network block volume, whose loop device is shared.
func sharedImage(ref *volumeRef) bool {
	return ref != nil && ref.network && ref.typ == state.TypeBlock
}
