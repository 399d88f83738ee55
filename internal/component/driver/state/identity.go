package state

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Identity names the owner of a state directory: which driver on which node keeps it, where.
// It is written twice, in every record document and in the marker file beside the data, so
// that a start-up can tell its own records from a stale backup, another node's directory or
// a mistyped --state-dir before it acts on what it finds. A driver removes data only on the
// word of a record whose identity matches the marker.
type Identity struct {
	// ID is random, made when the directory is first initialised; it survives renames of
	// the node or the driver only through an explicit adoption.
	ID       string `json:"id"`
	Driver   string `json:"driver"`
	NodeID   string `json:"nodeID"`
	StateDir string `json:"stateDir"`
}

// NewIdentity returns the identity of a directory being initialised now.
func NewIdentity(driver, nodeID, stateDir string) *Identity {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return &Identity{ID: hex.EncodeToString(b[:]), Driver: driver, NodeID: nodeID, StateDir: stateDir}
}

// Mismatch says how other differs from i ("" when they name the same owner).
func (i *Identity) Mismatch(other *Identity) string {
	switch {
	case other == nil:
		return "no identity"
	case i.ID != other.ID:
		return fmt.Sprintf("state directory ID %q, not %q", other.ID, i.ID)
	case i.Driver != other.Driver:
		return fmt.Sprintf("driver %q, not %q", other.Driver, i.Driver)
	case i.NodeID != other.NodeID:
		return fmt.Sprintf("node ID %q, not %q", other.NodeID, i.NodeID)
	case i.StateDir != other.StateDir:
		return fmt.Sprintf("state directory %q, not %q", other.StateDir, i.StateDir)
	}
	return ""
}

// Document is a record document that carries the identity of its owner.
type Document interface {
	Owner() *Identity
	SetOwner(*Identity)
}

// Owner is the identity the controller's records were written under.
func (s *Controller) Owner() *Identity { return s.Identity }

// SetOwner sets the identity the controller's records are written under.
func (s *Controller) SetOwner(id *Identity) { s.Identity = id }

// Owner is the identity the node's records were written under.
func (n *Node) Owner() *Identity { return n.Identity }

// SetOwner sets the identity the node's records are written under.
func (n *Node) SetOwner(id *Identity) { n.Identity = id }
