package driver

import (
	"context"
	"maps"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// CreateSnapshot copies a volume: a directory tree for "dir", a sparse image for "block".
// The copy is complete when the call returns, so snapshots are always ready_to_use.
func (c *controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	if err := required("name", name, "source_volume_id", srcID); err != nil {
		return nil, err
	}
	release, err := c.locks.hold([]string{snapshotNameKey(name)}, []string{volumeKey(srcID)})
	if err != nil {
		return nil, err
	}
	defer release()

	if err := c.rollbackAbandonedSnapshot(name); err != nil {
		return nil, err
	}
	c.pool.mu.Lock()
	c.mu.Lock()
	if sn := c.st.SnapshotByName(name); sn != nil {
		sn := *sn
		c.mu.Unlock()
		c.pool.mu.Unlock()
		if sn.SourceVolumeID != srcID {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for source volume %s", name, sn.SourceVolumeID)
		}
		return &csi.CreateSnapshotResponse{Snapshot: c.csiSnapshot(&sn)}, nil
	}
	sn, err := c.planSnapshotLocked(req)
	if err != nil {
		c.mu.Unlock()
		c.pool.mu.Unlock()
		return nil, err
	}
	// The intent holds the space the copy may need and names the copy, as for volumes.
	c.st.Snapshots[sn.ID] = sn
	c.pool.mu.Unlock()
	if err := c.commitUnlock(); err != nil {
		return nil, err
	}
	if sn.Type == state.TypeBlock {
		// A mounted filesystem may hold dirty pages above the loop device; flush them so
		// the copy is at least crash-consistent, as a power cut would leave it.
		unix.Sync()
	}
	b := c.backends[sn.Type]
	used, err := b.CreateSnapshot(srcID, sn.ID)
	if err != nil {
		if rerr := c.removeSnapshot(sn.ID, sn.Type); rerr != nil {
			klogFrom(ctx, c.log).Error(rerr, "Rolling back a failed CreateSnapshot; the restart finishes it", "snapshotID", sn.ID)
		}
		return nil, status.Errorf(dataErrorCode(err), "copy volume %s: %v", srcID, err)
	}
	c.mu.Lock()
	rec := c.st.Snapshots[sn.ID]
	rec.UsedBytes, rec.Creating = used, false
	done := *rec
	if err := c.commitUnlock(); err != nil {
		return nil, err // the restart rolls back what the record on disk still calls creating
	}
	klogFrom(ctx, c.log).V(2).Info("Created snapshot", "snapshotID", sn.ID, "name", name, "volumeID", srcID)
	return &csi.CreateSnapshotResponse{Snapshot: c.csiSnapshot(&done)}, nil
}

// planSnapshotLocked checks that a snapshot may be taken and returns its record, in the
// creating state, holding what the copy may occupy. The caller holds pool.mu and c.mu.
func (c *controller) planSnapshotLocked(req *csi.CreateSnapshotRequest) (*state.Snapshot, error) {
	srcID := req.GetSourceVolumeId()
	v := c.st.Volumes[srcID]
	if v == nil || v.Creating {
		return nil, status.Errorf(codes.NotFound, "source volume %s not found", srcID)
	}
	if _, ok := c.cfg.pickNode(req.GetAccessibilityRequirements()); !ok {
		return nil, status.Errorf(codes.ResourceExhausted, "snapshots can only be taken on %s", c.cfg.servedNodes())
	}
	need, err := c.backends[v.Type].UsedBytes(srcID)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "measure source volume: %v", err)
	}
	if err := c.fitsLocked(v.Type, need); err != nil {
		return nil, err
	}
	return &state.Snapshot{
		ID:             newID("s-"),
		Name:           req.GetName(),
		SourceVolumeID: srcID,
		Type:           v.Type,
		SizeBytes:      v.CapacityBytes,
		UsedBytes:      need,
		FsType:         v.FsType,
		Parameters:     maps.Clone(req.GetParameters()),
		CreatedAt:      time.Now().UTC(),
		Creating:       true,
	}, nil
}

// rollbackAbandonedSnapshot is rollbackAbandoned for snapshots.
func (c *controller) rollbackAbandonedSnapshot(name string) error {
	var typ string
	return c.rollbackCreating("snapshot", func() string {
		sn := c.st.SnapshotByName(name)
		if sn == nil || !sn.Creating {
			return ""
		}
		typ = sn.Type
		return sn.ID
	}, func(id string) error { return c.removeSnapshot(id, typ) })
}

// rollbackCreating removes what a crash or a failure left in the creating state: find
// returns its ID (under c.mu), or "" when there is none; remove deletes its data and record.
func (c *controller) rollbackCreating(kind string, find func() string, remove func(id string) error) error {
	c.mu.Lock()
	id := find()
	c.mu.Unlock()
	if id == "" {
		return nil
	}
	if err := remove(id); err != nil {
		return status.Errorf(codes.Internal, "roll back the failed creation of %s %s: %v", kind, id, err)
	}
	return nil
}

// removeSnapshot removes a snapshot's copy, then its record: DeleteSnapshot, and the
// rollback of a CreateSnapshot that its intent names.
func (c *controller) removeSnapshot(id, typ string) error {
	if err := c.backends[typ].DeleteSnapshot(id); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.st.Snapshots, id)
	return c.commitUnlock()
}

func (c *controller) csiSnapshot(sn *state.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:      sn.ID,
		SourceVolumeId:  sn.SourceVolumeID,
		SizeBytes:       sn.SizeBytes,
		CreationTime:    timestamppb.New(sn.CreatedAt),
		ReadyToUse:      true,
		GroupSnapshotId: sn.Group,
	}
}

// DeleteSnapshot removes a snapshot. Snapshots are independent copies, so volumes restored
// from it are unaffected.
func (c *controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := required("snapshot_id", id); err != nil {
		return nil, err
	}
	release, err := c.locks.acquire(snapshotKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	c.mu.Lock()
	sn := c.st.Snapshots[id]
	c.mu.Unlock()
	if sn == nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if sn.Group != "" {
		return nil, status.Errorf(codes.InvalidArgument, "snapshot %s is a member of group snapshot %s: delete the group with DeleteVolumeGroupSnapshot", id, sn.Group)
	}
	if err := c.removeSnapshot(id, sn.Type); err != nil {
		return nil, status.Errorf(codes.Internal, "delete snapshot: %v", err)
	}
	klogFrom(ctx, c.log).V(2).Info("Deleted snapshot", "snapshotID", id)
	return &csi.DeleteSnapshotResponse{}, nil
}

func (c *controller) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	resp := &csi.ListSnapshotsResponse{}
	err := c.readDurable(func() error {
		var ids []string
		for _, id := range c.st.SortedSnapshotIDs() {
			sn := c.st.Snapshots[id]
			if req.GetSnapshotId() != "" && id != req.GetSnapshotId() {
				continue
			}
			if req.GetSourceVolumeId() != "" && sn.SourceVolumeID != req.GetSourceVolumeId() {
				continue
			}
			ids = append(ids, id)
		}
		page, next, err := paginate(ids, req.GetStartingToken(), req.GetMaxEntries())
		if err != nil {
			return err
		}
		resp.NextToken = next
		for _, id := range page {
			resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: c.csiSnapshot(c.st.Snapshots[id])})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (c *controller) GetSnapshot(_ context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	if err := required("snapshot_id", req.GetSnapshotId()); err != nil {
		return nil, err
	}
	var snap *csi.Snapshot
	err := c.readDurable(func() error {
		if sn := c.st.Snapshots[req.GetSnapshotId()]; sn != nil && !sn.Creating {
			snap = c.csiSnapshot(sn)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %s not found", req.GetSnapshotId())
	}
	return &csi.GetSnapshotResponse{Snapshot: snap}, nil
}
