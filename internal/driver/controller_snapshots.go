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

	"github.com/kubevol/kubevol/internal/driver/state"
)

// CreateSnapshot copies a volume: a directory tree for "dir", a sparse image for "block".
// The copy is complete when the call returns, so snapshots are always ready_to_use.
func (c *controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, srcID := req.GetName(), req.GetSourceVolumeId()
	if err := required("name", name, "source_volume_id", srcID); err != nil {
		return nil, err
	}
	release, err := c.locks.acquire(snapshotNameKey(name), volumeKey(srcID))
	if err != nil {
		return nil, err
	}
	defer release()

	c.mu.Lock()
	if sn := c.st.SnapshotByName(name); sn != nil {
		sn := *sn
		c.mu.Unlock()
		if sn.SourceVolumeID != srcID {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists for source volume %s", name, sn.SourceVolumeID)
		}
		return &csi.CreateSnapshotResponse{Snapshot: c.csiSnapshot(&sn)}, nil
	}
	v := c.st.Volumes[srcID]
	if v == nil {
		c.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "source volume %s not found", srcID)
	}
	v = v.Clone()
	if !topologyAllowed(req.GetAccessibilityRequirements(), c.cfg.NodeID) {
		c.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "snapshots can only be taken on node %q", c.cfg.NodeID)
	}
	b := c.backends[v.Type]
	need, err := b.UsedBytes(srcID)
	if err != nil {
		c.mu.Unlock()
		return nil, status.Errorf(codes.Internal, "measure source volume: %v", err)
	}
	if err := c.reserveLocked(v.Type, need); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Unlock()

	if v.Type == state.TypeBlock {
		// A mounted filesystem may hold dirty pages above the loop device; flush them so
		// the copy is at least crash-consistent, as a power cut would leave it.
		unix.Sync()
	}
	sn := &state.Snapshot{
		ID:             newID("s-"),
		Name:           name,
		SourceVolumeID: srcID,
		Type:           v.Type,
		SizeBytes:      v.CapacityBytes,
		FsType:         v.FsType,
		Parameters:     maps.Clone(req.GetParameters()),
		CreatedAt:      time.Now().UTC(),
	}
	used, err := b.CreateSnapshot(srcID, sn.ID)
	if err != nil {
		c.unreserve(v.Type, need)
		_ = b.DeleteSnapshot(sn.ID)
		return nil, status.Errorf(storageCode(err), "copy volume %s: %v", srcID, err)
	}
	sn.UsedBytes = used
	c.mu.Lock()
	c.reserved[v.Type] -= need
	c.st.Snapshots[sn.ID] = sn
	if err := c.commitUnlock(); err != nil {
		_ = b.DeleteSnapshot(sn.ID)
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Created snapshot", "snapshotID", sn.ID, "name", name, "volumeID", srcID)
	return &csi.CreateSnapshotResponse{Snapshot: c.csiSnapshot(sn)}, nil
}

func (c *controller) csiSnapshot(sn *state.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     sn.ID,
		SourceVolumeId: sn.SourceVolumeID,
		SizeBytes:      sn.SizeBytes,
		CreationTime:   timestamppb.New(sn.CreatedAt),
		ReadyToUse:     true,
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
	if err := c.backends[sn.Type].DeleteSnapshot(id); err != nil {
		return nil, status.Errorf(codes.Internal, "delete snapshot data: %v", err)
	}
	c.mu.Lock()
	delete(c.st.Snapshots, id)
	if err := c.commitUnlock(); err != nil {
		return nil, err
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
		if sn := c.st.Snapshots[req.GetSnapshotId()]; sn != nil {
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
