package state

// Node is everything a node service owns: the volumes it staged, the targets it published
// and the ephemeral inline volumes it created. Only the node process writes it.
type Node struct {
	Version int `json:"version"`
	// Identity must match the state directory's marker; see Identity.
	Identity *Identity `json:"identity,omitempty"`
	// Stages are keyed by volume ID: CSI stages a volume at most once per node.
	Stages map[string]*Stage `json:"stages"`
	// Publishes are keyed by target path: one target holds one volume.
	Publishes map[string]*Publish `json:"publishes"`
	// Ephemeral are the inline volumes created by NodePublishVolume, keyed by volume ID.
	Ephemeral map[string]*Volume `json:"ephemeral"`
}

// NodeVersion is the schema version written by this code.
const NodeVersion = 1

// Phase says whether an operation completed. A record is written in PhasePending before the
// operation touches the system and switched to PhaseDone after, so that a restart knows what
// an interrupted operation may have left behind and rolls it back. PhaseRemoving marks an
// undo in progress, which a restart finishes.
type Phase string

// Phases of a node record.
const (
	PhasePending  Phase = "pending"
	PhaseDone     Phase = "done"
	PhaseRemoving Phase = "removing"
)

// Stage is one NodeStageVolume.
type Stage struct {
	VolumeID    string `json:"volumeID"`
	Type        string `json:"type"`
	StagingPath string `json:"stagingPath"`
	Block       bool   `json:"block"`
	FsType      string `json:"fsType,omitempty"`
	// MountFlags and AccessMode describe the capability, to detect an incompatible restage.
	MountFlags []string `json:"mountFlags,omitempty"`
	AccessMode int32    `json:"accessMode"`
	// Device is the loop device of a block volume, attached by this stage.
	Device string `json:"device,omitempty"`
	Phase  Phase  `json:"phase"`
}

// Publish is one NodePublishVolume.
type Publish struct {
	VolumeID    string   `json:"volumeID"`
	TargetPath  string   `json:"targetPath"`
	StagingPath string   `json:"stagingPath,omitempty"`
	Block       bool     `json:"block"`
	ReadOnly    bool     `json:"readOnly"`
	MountFlags  []string `json:"mountFlags,omitempty"`
	AccessMode  int32    `json:"accessMode"`
	Ephemeral   bool     `json:"ephemeral,omitempty"`
	// Device is the loop device published: the staged device of a raw block volume, or the
	// device an ephemeral "block" volume is mounted from, formatted with FsType.
	Device string `json:"device,omitempty"`
	FsType string `json:"fsType,omitempty"`
	Phase  Phase  `json:"phase"`
}

// NewNode returns an empty node state.
func NewNode() *Node {
	n := &Node{}
	n.Normalize()
	return n
}

// Normalize fills the maps a decoded document may lack.
func (n *Node) Normalize() {
	if n.Stages == nil {
		n.Stages = map[string]*Stage{}
	}
	if n.Publishes == nil {
		n.Publishes = map[string]*Publish{}
	}
	if n.Ephemeral == nil {
		n.Ephemeral = map[string]*Volume{}
	}
	n.Version = NodeVersion
}

// PublishesOf lists the publish records of one volume.
func (n *Node) PublishesOf(volumeID string) []*Publish {
	var out []*Publish
	for _, p := range n.Publishes {
		if p.VolumeID == volumeID {
			out = append(out, p)
		}
	}
	return out
}
