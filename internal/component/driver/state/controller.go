package state

import (
	"maps"
	"slices"
	"time"
)

// Backend types, chosen by the StorageClass parameter "type".
const (
	TypeDir   = "dir"
	TypeBlock = "block"
)

// Controller is everything the controller service owns: the volumes and snapshots it created
// and the nodes each volume is published to. Only the controller process writes it; a split
// node process may read it to learn a volume's capacity.
type Controller struct {
	Version int `json:"version"`
	// Identity must match the state directory's marker; see Identity.
	Identity  *Identity            `json:"identity,omitempty"`
	Volumes   map[string]*Volume   `json:"volumes"`
	Snapshots map[string]*Snapshot `json:"snapshots"`
	// Groups are the CreateVolumeGroupSnapshot results; their members are in Snapshots.
	Groups map[string]*Group `json:"groups,omitempty"`
}

// ControllerVersion is the schema version written by this code.
const ControllerVersion = 1

// NewController returns an empty controller state.
func NewController() *Controller {
	return &Controller{Version: ControllerVersion, Volumes: map[string]*Volume{}, Snapshots: map[string]*Snapshot{}, Groups: map[string]*Group{}}
}

// Volume is one volume created by CreateVolume (or by an ephemeral NodePublish, in the
// node's own state).
type Volume struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	Type          string            `json:"type"`
	CapacityBytes int64             `json:"capacityBytes"`
	FsType        string            `json:"fsType,omitempty"`
	Parameters    map[string]string `json:"parameters,omitempty"`
	// MutableParameters are the volume's current mutable parameters: CreateVolume's
	// mutable_parameters, then every ControllerModifyVolume merged in.
	MutableParameters map[string]string `json:"mutableParameters,omitempty"`
	// Source is "snapshot:<id>" or "volume:<id>" when the volume was pre-populated.
	Source string `json:"source,omitempty"`
	Node   string `json:"node"`
	// Network: the volume is reachable from every node (placement "network"); Node is "".
	Network   bool      `json:"network,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Attachments are the ControllerPublishVolume records, keyed by node ID.
	Attachments map[string]Attachment `json:"attachments,omitempty"`
	// Creating is the intent of a CreateVolume: persisted before any byte of the volume
	// exists and cleared once the data is complete. A restart rolls back what a Creating
	// record names, and only that; data no record names is quarantined, never deleted.
	Creating bool `json:"creating,omitempty"`
	// Deleting is set, and persisted, before DeleteVolume removes the bytes, so a crash in
	// between leaves a record that says so, and the restart finishes the deletion.
	Deleting bool `json:"deleting,omitempty"`
}

// Attachment is one ControllerPublishVolume that succeeded and was not yet unpublished.
type Attachment struct {
	ReadOnly   bool  `json:"readOnly"`
	AccessMode int32 `json:"accessMode"`
	Block      bool  `json:"block"`
}

// Snapshot is one CreateSnapshot result.
type Snapshot struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	SourceVolumeID string `json:"sourceVolumeID"`
	Type           string `json:"type"`
	SizeBytes      int64  `json:"sizeBytes"`
	// UsedBytes is what the copy occupies in the pool; it can be less than SizeBytes.
	UsedBytes  int64             `json:"usedBytes"`
	FsType     string            `json:"fsType,omitempty"`
	Parameters map[string]string `json:"parameters,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	// Creating is the intent of a CreateSnapshot, as Volume.Creating.
	Creating bool `json:"creating,omitempty"`
	// Group is the ID of the group snapshot this snapshot is a member of: it is deleted
	// only with its group.
	Group string `json:"group,omitempty"`
}

// Group is one CreateVolumeGroupSnapshot result: member snapshots taken at one point in time.
type Group struct {
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	SourceVolumeIDs []string          `json:"sourceVolumeIDs"`
	SnapshotIDs     []string          `json:"snapshotIDs"`
	Parameters      map[string]string `json:"parameters,omitempty"`
	CreatedAt       time.Time         `json:"createdAt"`
	// Creating is the intent of a CreateVolumeGroupSnapshot: written with the members'
	// intents before any copy exists. A restart rolls back the group and its members.
	Creating bool `json:"creating,omitempty"`
	// Deleting is persisted before DeleteVolumeGroupSnapshot removes the members; a restart
	// finishes the deletion.
	Deleting bool `json:"deleting,omitempty"`
}

// GroupByName finds a group snapshot by its CreateVolumeGroupSnapshot name.
func (s *Controller) GroupByName(name string) *Group {
	for _, g := range s.Groups {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// Clone returns a deep copy, so that a change can be prepared and thrown away if it cannot
// be persisted.
func (v *Volume) Clone() *Volume {
	if v == nil {
		return nil
	}
	c := *v
	c.Parameters = maps.Clone(v.Parameters)
	c.MutableParameters = maps.Clone(v.MutableParameters)
	c.Attachments = maps.Clone(v.Attachments)
	return &c
}

// VolumeByName finds a volume by its CreateVolume name, complete or being created.
func (s *Controller) VolumeByName(name string) *Volume {
	for _, v := range s.Volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// SnapshotByName finds a snapshot by its CreateSnapshot name.
func (s *Controller) SnapshotByName(name string) *Snapshot {
	for _, sn := range s.Snapshots {
		if sn.Name == name {
			return sn
		}
	}
	return nil
}

// SortedVolumeIDs lists the IDs of the volumes created (not those still being created, whose
// IDs no caller knows yet) in a stable order, which makes list pagination tokens
// meaningful.
func (s *Controller) SortedVolumeIDs() []string {
	return createdIDs(s.Volumes, func(v *Volume) bool { return v.Creating })
}

// SortedSnapshotIDs lists the IDs of the snapshots created, in a stable order.
func (s *Controller) SortedSnapshotIDs() []string {
	return createdIDs(s.Snapshots, func(sn *Snapshot) bool { return sn.Creating })
}

func createdIDs[T any](records map[string]T, creating func(T) bool) []string {
	var ids []string
	for id, r := range records {
		if !creating(r) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Normalize fills the maps a decoded document may lack.
func (s *Controller) Normalize() {
	if s.Volumes == nil {
		s.Volumes = map[string]*Volume{}
	}
	if s.Snapshots == nil {
		s.Snapshots = map[string]*Snapshot{}
	}
	if s.Groups == nil {
		s.Groups = map[string]*Group{}
	}
	s.Version = ControllerVersion
}
