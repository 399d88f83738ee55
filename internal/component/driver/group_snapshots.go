package driver

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// groupController serves the CSI GroupController service over the controller's state.
//
// A group snapshot is a consistent point in time of all its members. The volumes' bytes are
// written by the pods through the kernel, not through the driver, so the driver cannot stop
// writers; instead it proves that nothing was written while it copied: it notes the time t0,
// copies every member one after the other, then checks that no inode of any source (file,
// directory, or block image) has a ctime at or after t0 (backend.ChangedSince). If none has,
// every copy equals its volume as it was at t0, the same instant for all. If one changed, the
// copies are thrown away and taken again (groupCopyAttempts times), and then the call fails
// with ABORTED, which the CO retries with backoff. Block volumes are flushed (sync) before
// each attempt, so the images hold what a power cut at t0 would have left: crash-consistent.
type groupController struct {
	csi.UnimplementedGroupControllerServer
	c *controller
}

// groupCopyAttempts is how many times a group copy is taken before the call gives up.
const groupCopyAttempts = 5

// groupClockMargin covers the lag of the kernel's coarse clock behind time.Now, so that a
// change made after t0 always has a ctime at or after t0 minus the margin.
const groupClockMargin = 50 * time.Millisecond

func (g *groupController) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}},
	}}}, nil
}

// CreateVolumeGroupSnapshot copies every source volume at one point in time. It is
// idempotent by name; the same name with other sources is ALREADY_EXISTS.
func (g *groupController) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	c := g.c
	name := req.GetName()
	if err := required("name", name); err != nil {
		return nil, err
	}
	srcs := slices.Clone(req.GetSourceVolumeIds())
	slices.Sort(srcs)
	if len(srcs) == 0 || slices.Contains(srcs, "") {
		return nil, status.Error(codes.InvalidArgument, "source_volume_ids must name at least one volume, none empty")
	}
	if len(slices.Compact(slices.Clone(srcs))) != len(srcs) {
		return nil, status.Error(codes.InvalidArgument, "source_volume_ids names a volume twice")
	}
	var sources []string
	for _, id := range srcs {
		sources = append(sources, volumeKey(id))
	}
	// The members are only read: shared with other copies and attach records of them.
	release, err := c.locks.hold([]string{groupNameKey(name)}, sources)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := c.rollbackAbandonedGroup(name); err != nil {
		return nil, err
	}

	c.pool.mu.Lock()
	c.mu.Lock()
	if grp := c.st.GroupByName(name); grp != nil {
		resp, err := c.groupResponseLocked(grp, srcs)
		c.mu.Unlock()
		c.pool.mu.Unlock()
		return resp, err
	}
	grp := &state.Group{ID: newID("g-"), Name: name, SourceVolumeIDs: srcs, Parameters: maps.Clone(req.GetParameters()), Creating: true}
	var members []*state.Snapshot
	undo := func() {
		for _, sn := range members {
			delete(c.st.Snapshots, sn.ID)
		}
	}
	for _, src := range srcs {
		// Each member's intent holds its space before the next is planned, so the group fits as a whole.
		sn, err := c.planSnapshotLocked(&csi.CreateSnapshotRequest{Name: "group " + name + " " + src, SourceVolumeId: src, Parameters: req.GetParameters()})
		if err != nil {
			undo()
			c.mu.Unlock()
			c.pool.mu.Unlock()
			return nil, err
		}
		sn.Group = grp.ID
		c.st.Snapshots[sn.ID] = sn
		members = append(members, sn)
		grp.SnapshotIDs = append(grp.SnapshotIDs, sn.ID)
	}
	c.st.Groups[grp.ID] = grp
	c.pool.mu.Unlock()
	if err := c.commitUnlock(); err != nil {
		return nil, err // the restart rolls back the intents the disk may hold
	}

	at, used, err := c.copyGroup(ctx, members)
	if err != nil {
		if rerr := c.removeGroup(grp.ID); rerr != nil {
			klogFrom(ctx, c.log).Error(rerr, "Rolling back a failed CreateVolumeGroupSnapshot; the restart finishes it", "groupSnapshotID", grp.ID)
		}
		return nil, err
	}
	c.mu.Lock()
	rec := c.st.Groups[grp.ID]
	rec.Creating, rec.CreatedAt = false, at
	for i, sn := range members {
		m := c.st.Snapshots[sn.ID]
		m.Creating, m.UsedBytes, m.CreatedAt = false, used[i], at
	}
	resp, _ := c.groupResponseLocked(rec, srcs)
	if err := c.commitUnlock(); err != nil {
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Created group snapshot", "groupSnapshotID", grp.ID, "name", name, "volumeIDs", srcs)
	return resp, nil
}

// copyGroup copies every member until one round of copies saw no source change, and returns
// that round's point in time and the bytes each copy occupies.
func (c *controller) copyGroup(ctx context.Context, members []*state.Snapshot) (time.Time, []int64, error) {
	used := make([]int64, len(members))
	for attempt := 1; attempt <= groupCopyAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return time.Time{}, nil, status.FromContextError(err).Err()
		}
		for _, sn := range members {
			if sn.Type == state.TypeBlock {
				unix.Sync() // the images then hold what the mounted filesystems wrote
				break
			}
		}
		t0 := time.Now()
		for i, sn := range members {
			n, err := c.backends[sn.Type].CreateSnapshot(sn.SourceVolumeID, sn.ID)
			if err != nil {
				return time.Time{}, nil, status.Errorf(dataErrorCode(err), "copy volume %s: %v", sn.SourceVolumeID, err)
			}
			used[i] = n
		}
		changed := ""
		for _, sn := range members {
			b := c.backends[sn.Type]
			ch, err := backend.ChangedSince(b.VolumePath(sn.SourceVolumeID), t0.Add(-groupClockMargin))
			if err != nil {
				return time.Time{}, nil, status.Errorf(codes.Internal, "check volume %s: %v", sn.SourceVolumeID, err)
			}
			if ch {
				changed = sn.SourceVolumeID
				break
			}
		}
		if changed == "" {
			return t0.UTC(), used, nil
		}
		klogFrom(ctx, c.log).V(2).Info("A volume changed while the group was copied; copying again", "volumeID", changed, "attempt", attempt)
		for _, sn := range members {
			if err := c.backends[sn.Type].DeleteSnapshot(sn.ID); err != nil {
				return time.Time{}, nil, status.Errorf(codes.Internal, "discard copy %s: %v", sn.ID, err)
			}
		}
		// A change made just before t0 is inside the clock margin too; the next round starts
		// past it, and a writer that pauses for a moment lets it through.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 2 * groupClockMargin):
		}
	}
	return time.Time{}, nil, status.Errorf(codes.Aborted, "the volumes kept changing while they were copied (%d attempts): no consistent point in time yet, retry", groupCopyAttempts)
}

// groupResponseLocked answers for an existing group: ALREADY_EXISTS if its sources differ.
func (c *controller) groupResponseLocked(grp *state.Group, srcs []string) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	if !slices.Equal(grp.SourceVolumeIDs, srcs) {
		return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q exists for volumes %v", grp.Name, grp.SourceVolumeIDs)
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: c.csiGroupLocked(grp)}, nil
}

func (c *controller) csiGroupLocked(grp *state.Group) *csi.VolumeGroupSnapshot {
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: grp.ID, CreationTime: timestamppb.New(grp.CreatedAt), ReadyToUse: true}
	for _, id := range grp.SnapshotIDs {
		if sn := c.st.Snapshots[id]; sn != nil {
			out.Snapshots = append(out.Snapshots, c.csiSnapshot(sn))
		}
	}
	return out
}

// rollbackAbandonedGroup removes a group whose creation a crash or a failure interrupted.
func (c *controller) rollbackAbandonedGroup(name string) error {
	return c.rollbackCreating("group snapshot", func() string {
		if grp := c.st.GroupByName(name); grp != nil && grp.Creating {
			return grp.ID
		}
		return ""
	}, c.removeGroup)
}

// removeGroup removes a group's member copies and records, then the group's record. A crash
// in between leaves the group record, which a retry or the restart finishes.
func (c *controller) removeGroup(id string) error {
	c.mu.Lock()
	grp := c.st.Groups[id]
	var members []state.Snapshot
	if grp != nil {
		for _, sid := range grp.SnapshotIDs {
			if sn := c.st.Snapshots[sid]; sn != nil {
				members = append(members, *sn)
			}
		}
	}
	c.mu.Unlock()
	if grp == nil {
		return nil
	}
	for _, sn := range members {
		if err := c.removeSnapshot(sn.ID, sn.Type); err != nil {
			return err
		}
	}
	c.mu.Lock()
	delete(c.st.Groups, id)
	return c.commitUnlock()
}

// DeleteVolumeGroupSnapshot deletes a group and all its members. snapshot_ids must list the
// group's members exactly (INVALID_ARGUMENT otherwise, as CSI asks of a plugin that can tell).
func (g *groupController) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	c := g.c
	id := req.GetGroupSnapshotId()
	if err := required("group_snapshot_id", id); err != nil {
		return nil, err
	}
	release, err := c.locks.acquire(groupKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	c.mu.Lock()
	grp := c.st.Groups[id]
	if grp == nil {
		c.mu.Unlock()
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if err := matchMembers(grp, req.GetSnapshotIds()); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	// Every member copy is still recorded under a deleting group: a crash half-way through
	// leaves a record that the retry or the restart completes.
	grp.Deleting = true
	if err := c.commitUnlock(); err != nil {
		return nil, err
	}
	if err := c.removeGroup(id); err != nil {
		return nil, status.Errorf(codes.Internal, "delete group snapshot: %v", err)
	}
	klogFrom(ctx, c.log).V(2).Info("Deleted group snapshot", "groupSnapshotID", id)
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// GetVolumeGroupSnapshot reports a group snapshot; NOT_FOUND once it is gone.
func (g *groupController) GetVolumeGroupSnapshot(_ context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	c := g.c
	id := req.GetGroupSnapshotId()
	if err := required("group_snapshot_id", id); err != nil {
		return nil, err
	}
	var out *csi.VolumeGroupSnapshot
	err := c.readDurable(func() error {
		grp := c.st.Groups[id]
		if grp == nil || grp.Creating || grp.Deleting {
			return nil
		}
		if err := matchMembers(grp, req.GetSnapshotIds()); err != nil {
			return err
		}
		out = c.csiGroupLocked(grp)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, status.Errorf(codes.NotFound, "group snapshot %s not found", id)
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: out}, nil
}

func matchMembers(grp *state.Group, ids []string) error {
	want := slices.Sorted(slices.Values(grp.SnapshotIDs))
	got := slices.Sorted(slices.Values(ids))
	if !slices.Equal(want, got) {
		return status.Errorf(codes.InvalidArgument, "snapshot_ids %v are not the members of group snapshot %s (%v)", ids, grp.ID, grp.SnapshotIDs)
	}
	return nil
}

// reconcileGroups finishes the group snapshots a crash interrupted: a creation is rolled
// back, a deletion completed. It runs before the snapshots' own rollback.
func (c *controller) reconcileGroups() error {
	c.mu.Lock()
	var ids []string
	for id, grp := range c.st.Groups {
		if grp.Creating || grp.Deleting {
			ids = append(ids, id)
			c.log.Info("Finishing an interrupted group snapshot operation", "groupSnapshotID", id, "name", grp.Name, "creating", grp.Creating, "deleting", grp.Deleting)
		}
	}
	c.mu.Unlock()
	for _, id := range ids {
		if err := c.removeGroup(id); err != nil {
			return err
		}
	}
	return nil
}
