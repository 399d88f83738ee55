package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// NodePublishVolume bind-mounts a staged volume at the target path: the staging mount for a
// filesystem, the loop device node for raw block. Inline ephemeral volumes are created here.
func (n *node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	vc := req.GetVolumeCapability()
	if err := requiredWithCapability(vc, "volume_id", id, "target_path", target); err != nil {
		return nil, err
	}
	if req.GetVolumeContext()[ContextEphemeral] == "true" {
		return n.publishEphemeral(ctx, req)
	}
	stagingPath := req.GetStagingTargetPath()
	ownStage := n.cfg.off[WithoutStaging]
	// CSI: with STAGE_UNSTAGE_VOLUME, a publish without staging_target_path is
	// FAILED_PRECONDITION.
	if stagingPath == "" && !ownStage {
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path is required: the volume must be staged first")
	}
	ref, release, err := n.lockCapable(id, vc)
	if err != nil {
		return nil, err
	}
	defer release()
	if ownStage {
		// Without STAGE_UNSTAGE_VOLUME the CO never stages: the publish does what the stage
		// would have done, at the driver's own path, and the last unpublish undoes it.
		stagingPath = n.ownStagingPath(id)
		if err := n.stageLocked(ctx, ref, stagingPath, vc); err != nil {
			return nil, err
		}
	}
	s := n.stage(id)
	if s == nil || s.Phase != state.PhaseDone || s.StagingPath != filepath.Clean(stagingPath) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s must be staged at %s before it is published", id, stagingPath)
	}
	if s.Block != (vc.GetBlock() != nil) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s was staged for %s access", id, accessName(s.Block))
	}
	want := &state.Publish{
		VolumeID:    id,
		TargetPath:  filepath.Clean(target),
		StagingPath: s.StagingPath,
		Block:       s.Block,
		ReadOnly:    req.GetReadonly(),
		MountFlags:  vc.GetMount().GetMountFlags(),
		AccessMode:  int32(vc.GetAccessMode().GetMode()),
		Device:      s.Device,
		Phase:       state.PhasePending,
	}
	resp, err := n.publishWith(ctx, want, func() error { return n.mountPublish(want) }, nil)
	if err != nil && ownStage {
		n.releaseOwnStage(ctx, id)
	}
	return resp, err
}

// releaseOwnStage undoes the driver's own stage of id once no target uses it (--without
// staging); the caller holds the volume's lock. A failure is logged: the stage stays
// recorded, and the next publish or unpublish of the volume tries again.
func (n *node) releaseOwnStage(ctx context.Context, id string) {
	if len(n.publishesOf(id)) > 0 {
		return
	}
	path := n.ownStagingPath(id)
	if err := n.unstageLocked(ctx, id, path); err != nil {
		klogFrom(ctx, n.log).Error(err, "Releasing the driver's own stage", "volumeID", id)
		return
	}
	// The driver made the directory, as the kubelet makes the staging directories it
	// removes. Remove takes only an empty directory: never data, never a mount point.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		klogFrom(ctx, n.log).Error(err, "Removing the driver's own staging directory", "volumeID", id, "path", path)
	}
}

// publishWith runs the record-then-act sequence common to all publishes: the idempotency and
// multi-target rules of CSI NodePublishVolume, a pending record, the mount, the done record.
// created, if set, is run first to create the bytes of an ephemeral volume.
func (n *node) publishWith(ctx context.Context, want *state.Publish, doMount, created func() error) (*csi.NodePublishVolumeResponse, error) {
	id := want.VolumeID
	if have := n.publish(want.TargetPath); have != nil {
		if have.VolumeID != id {
			return nil, status.Errorf(codes.FailedPrecondition, "target %s holds volume %s", want.TargetPath, have.VolumeID)
		}
		if have.Phase == state.PhaseDone {
			if !samePublish(have, want) {
				return nil, status.Errorf(codes.AlreadyExists, "volume %s is published at %s with different arguments", id, want.TargetPath)
			}
			if err := n.mountPublish(have); err != nil {
				return nil, status.Errorf(codes.Internal, "repair publish of %s: %v", id, err)
			}
			return &csi.NodePublishVolumeResponse{}, nil
		}
		if err := n.teardownPublish(ctx, have); err != nil {
			return nil, status.Errorf(codes.Internal, "undo earlier publish of %s: %v", id, err)
		}
	}
	for _, other := range n.publishesOf(id) {
		if other.TargetPath != want.TargetPath && !(multiTarget(want.AccessMode) && multiTarget(other.AccessMode)) {
			// CSI NodePublishVolume table: a second target of a volume that is not
			// MULTI_NODE_* or SINGLE_NODE_MULTI_WRITER is FAILED_PRECONDITION.
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is already published at %s and its access mode allows one target", id, other.TargetPath)
		}
	}
	if err := n.putPublish(want); err != nil {
		return nil, err
	}
	err := func() error {
		if created != nil {
			if err := created(); err != nil {
				return err
			}
		}
		return doMount()
	}()
	if err != nil {
		if terr := n.teardownPublish(ctx, want); terr != nil {
			klogFrom(ctx, n.log).Error(terr, "Undoing a failed publish", "volumeID", id)
		} else {
			_ = n.update(func(st *state.Node) { delete(st.Publishes, want.TargetPath) })
		}
		return nil, status.Errorf(errorCode(err), "publish volume %s: %v", id, status.Convert(err).Message())
	}
	want.Phase = state.PhaseDone
	if err := n.putPublish(want); err != nil {
		return nil, err
	}
	klogFrom(ctx, n.log).V(2).Info("Published volume", "volumeID", id, "target", want.TargetPath)
	return &csi.NodePublishVolumeResponse{}, nil
}

func multiTarget(mode int32) bool {
	switch csi.VolumeCapability_AccessMode_Mode(mode) {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return true
	}
	return false
}

func samePublish(a, b *state.Publish) bool {
	return a.StagingPath == b.StagingPath && a.Block == b.Block && a.ReadOnly == b.ReadOnly &&
		a.AccessMode == b.AccessMode && slices.Equal(a.MountFlags, b.MountFlags)
}

func accessName(block bool) string {
	if block {
		return "raw block"
	}
	return "filesystem"
}

// mountPublish bind-mounts the published form at the target, creating the target (a
// directory, or a file for raw block) if needed: CSI gives the SP the job of creating it.
func (n *node) mountPublish(p *state.Publish) error {
	if mounted, err := isMounted(p.TargetPath); err != nil || mounted {
		return err
	}
	opts := []string{"bind"}
	// A volume made read-only by its mutable parameters is mounted so wherever it is published.
	if p.ReadOnly || (!p.Ephemeral && n.readOnlyVolume(p.VolumeID)) {
		opts = append(opts, "ro")
	}
	if p.Block {
		if err := os.MkdirAll(filepath.Dir(p.TargetPath), 0o750); err != nil {
			return err
		}
		f, err := os.OpenFile(p.TargetPath, os.O_CREATE|os.O_RDONLY, 0o640)
		if err != nil {
			return err
		}
		_ = f.Close()
		return n.bind(p.Device, p.TargetPath, opts[1:])
	}
	if err := os.MkdirAll(p.TargetPath, 0o750); err != nil {
		return err
	}
	if p.Ephemeral && p.Device != "" {
		if p.ReadOnly {
			// The image is new and has no filesystem yet, and mount-utils never formats a
			// disk it is to mount read-only ("cannot mount unformatted disk ... in read-only
			// mode"): format it by a read-write mount first, then mount it read-only. The
			// read-only mount is a mount of its own rather than a remount, so that it is
			// read-only in every mount namespace it propagates to (a containerised driver's
			// remount changes only its own namespace's copy).
			if err := n.mounter.FormatAndMount(p.Device, p.TargetPath, p.FsType, withNoUUID(p.FsType, p.MountFlags)); err != nil {
				return err
			}
			if err := n.mounter.Unmount(p.TargetPath); err != nil {
				return err
			}
		}
		return n.mounter.FormatAndMount(p.Device, p.TargetPath, p.FsType, withNoUUID(p.FsType, append(p.MountFlags, opts[1:]...)))
	}
	return n.bind(p.StagingPath, p.TargetPath, append(opts[1:], p.MountFlags...))
}

// bind bind-mounts source at target with opts besides "bind"; a read-only one is read-only
// wherever it propagates (bindReadOnly).
func (n *node) bind(source, target string, opts []string) error {
	if err := bindReadOnly(source, target, opts); !errors.Is(err, errNoBindAttrs) {
		return err
	}
	return n.mounter.Mount(source, target, "", append([]string{"bind"}, opts...))
}

// teardownPublish undoes a publish, complete or not: unmount, remove the target, and for an
// ephemeral volume delete the volume.
func (n *node) teardownPublish(ctx context.Context, p *state.Publish) error {
	if err := n.unmountAll(p.TargetPath); err != nil {
		return err
	}
	if err := os.Remove(p.TargetPath); err != nil && !os.IsNotExist(err) {
		return err
	}
	if p.Ephemeral {
		return n.destroyEphemeral(ctx, p.VolumeID)
	}
	return nil
}

// NodeUnpublishVolume undoes NodePublishVolume. CSI: a volume not published at the target
// is OK; an unknown volume is NOT_FOUND.
func (n *node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := required("volume_id", id, "target_path", target); err != nil {
		return nil, err
	}
	release, err := n.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	p := n.publish(filepath.Clean(target))
	if p == nil || p.VolumeID != id {
		if _, err := n.resolve(id); err != nil {
			return nil, err
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	p.Phase = state.PhaseRemoving
	if err := n.putPublish(p); err != nil {
		return nil, err
	}
	if err := n.teardownPublish(ctx, p); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish volume %s: %v", id, err)
	}
	if err := n.update(func(st *state.Node) { delete(st.Publishes, p.TargetPath) }); err != nil {
		return nil, err
	}
	if n.cfg.off[WithoutStaging] && !p.Ephemeral {
		n.releaseOwnStage(ctx, id)
	}
	klogFrom(ctx, n.log).V(2).Info("Unpublished volume", "volumeID", id, "target", p.TargetPath)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
