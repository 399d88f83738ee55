package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	utilexec "k8s.io/utils/exec"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// NodeStageVolume makes a volume ready on this node at the staging path: a bind mount of
// the directory for "dir"; for "block" a loop device, formatted at the first stage (never
// reformatted, the SafeFormatAndMount rule) and mounted, or left raw for block access.
func (n *node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	vc := req.GetVolumeCapability()
	if err := requiredWithCapability(vc, "volume_id", id, "staging_target_path", path); err != nil {
		return nil, err
	}
	ref, release, err := n.lockCapable(id, vc)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := n.stageLocked(ctx, ref, path, vc); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// stageLocked stages ref at path; the caller holds the volume's lock.
func (n *node) stageLocked(ctx context.Context, ref *volumeRef, path string, vc *csi.VolumeCapability) error {
	id := ref.id
	want := &state.Stage{
		VolumeID:    id,
		Type:        ref.typ,
		StagingPath: filepath.Clean(path),
		Block:       vc.GetBlock() != nil,
		MountFlags:  vc.GetMount().GetMountFlags(),
		AccessMode:  int32(vc.GetAccessMode().GetMode()),
		Phase:       state.PhasePending,
	}
	if ref.typ == state.TypeBlock && !want.Block {
		want.FsType = fsTypeOf(vc, ref.fsType)
	}
	if have := n.stage(id); have != nil {
		if have.Phase == state.PhaseDone {
			if have.StagingPath != want.StagingPath {
				return status.Errorf(codes.FailedPrecondition, "volume %s is already staged at %s", id, have.StagingPath)
			}
			if !sameStage(have, want) {
				return status.Errorf(codes.AlreadyExists, "volume %s is staged at %s with a different capability", id, path)
			}
			if err := n.repairStage(ctx, ref, have); err != nil {
				return status.Errorf(codes.Internal, "repair stage of %s: %v", id, err)
			}
			return nil
		}
		// An earlier attempt failed half-way: undo what it did before starting over.
		if err := n.teardownStage(ctx, ref, have); err != nil {
			return status.Errorf(codes.Internal, "undo earlier stage of %s: %v", id, err)
		}
	}
	if err := n.putStage(want); err != nil {
		return err
	}
	if err := n.doStage(ctx, ref, want); err != nil {
		if terr := n.teardownStage(ctx, ref, want); terr != nil {
			klogFrom(ctx, n.log).Error(terr, "Undoing a failed stage", "volumeID", id)
			return status.Errorf(codes.Internal, "stage volume %s: %v", id, err)
		}
		_ = n.update(func(st *state.Node) { delete(st.Stages, id) })
		code := codes.Internal
		if status.Code(err) == codes.FailedPrecondition {
			code = codes.FailedPrecondition // in use on another node
		}
		return status.Errorf(code, "stage volume %s: %v", id, status.Convert(err).Message())
	}
	want.Phase = state.PhaseDone
	if err := n.putStage(want); err != nil {
		return err
	}
	klogFrom(ctx, n.log).V(2).Info("Staged volume", "volumeID", id, "path", want.StagingPath, "device", want.Device)
	return nil
}

func sameStage(a, b *state.Stage) bool {
	return a.Block == b.Block && a.FsType == b.FsType && a.AccessMode == b.AccessMode && slices.Equal(a.MountFlags, b.MountFlags)
}

// doStage performs a stage; s.Device is filled in for block volumes.
func (n *node) doStage(ctx context.Context, ref *volumeRef, s *state.Stage) error {
	if err := os.MkdirAll(s.StagingPath, 0o750); err != nil {
		return err
	}
	if ref.typ == state.TypeBlock {
		if err := n.attachImage(ctx, ref, s); err != nil {
			return err
		}
	}
	return n.mountStage(ref, s)
}

// mountStage mounts the staging path if nothing is mounted there yet.
func (n *node) mountStage(ref *volumeRef, s *state.Stage) error {
	if s.Block {
		return nil // raw block: the loop device is the staged form
	}
	if mounted, err := isMounted(s.StagingPath); err != nil || mounted {
		return err
	}
	if ref.typ == state.TypeDir {
		return n.mounter.Mount(ref.path, s.StagingPath, "", []string{"bind"})
	}
	if err := n.growUnmounted(s.Device, s.StagingPath); err != nil {
		return err
	}
	if err := n.mounter.FormatAndMount(s.Device, s.StagingPath, s.FsType, withNoUUID(s.FsType, s.MountFlags)); err != nil {
		return err
	}
	// An image lengthened while the volume was not staged (offline expansion) gets its
	// filesystem grown now, if growUnmounted could not (xfs grows only when mounted).
	if need, err := n.resizer.NeedResize(s.Device, s.StagingPath); err == nil && need {
		if _, err := n.resizer.Resize(s.Device, s.StagingPath); err != nil {
			return fmt.Errorf("grow filesystem: %w", err)
		}
	}
	return nil
}

// repairStage brings a completed stage back in line with the system: after a reboot or a
// manual unmount the loop device or the mount may be gone.
func (n *node) repairStage(ctx context.Context, ref *volumeRef, s *state.Stage) error {
	if ref.typ == state.TypeBlock {
		was := s.Device
		if err := n.attachImage(ctx, ref, s); err != nil {
			return err
		}
		if s.Device != was {
			if err := n.putStage(s); err != nil {
				return err
			}
		}
	}
	return n.mountStage(ref, s)
}

// attachImage gives a block volume's stage its loop device: the one of the image if there is
// one, else a new one; a network volume's through its holders' record (node_network.go).
func (n *node) attachImage(ctx context.Context, ref *volumeRef, s *state.Stage) error {
	attach := func() error {
		dev, err := n.loops.Attach(ctx, ref.path)
		if err == nil {
			s.Device = dev
		}
		return err
	}
	if sharedImage(ref) {
		return n.holdNetwork(ref, !s.Block, attach)
	}
	return attach()
}

// teardownStage undoes a stage, complete or not: unmount, then detach the loop device (a
// network volume's only when no other node holds it).
func (n *node) teardownStage(ctx context.Context, ref *volumeRef, s *state.Stage) error {
	if !s.Block {
		if err := n.unmountAll(s.StagingPath); err != nil {
			return err
		}
	}
	if s.Type != state.TypeBlock {
		return nil
	}
	if sharedImage(ref) {
		return n.releaseNetwork(ref.id, func() error { return n.detachImage(ctx, ref, s) })
	}
	return n.detachImage(ctx, ref, s)
}

// detachImage detaches the loop device of a stage's image.
func (n *node) detachImage(ctx context.Context, ref *volumeRef, s *state.Stage) error {
	// The record may predate the attach (a crash right after losetup): find the device
	// by its image.
	dev := s.Device
	if ref != nil {
		found, err := n.loops.Find(ctx, ref.path)
		if err != nil {
			return err
		}
		if found != "" {
			dev = found
		}
	}
	if dev == "" {
		return nil
	}
	return n.loops.Detach(ctx, dev)
}

// NodeUnstageVolume undoes NodeStageVolume. CSI: a volume not staged at that path is OK; an
// unknown volume is NOT_FOUND.
func (n *node) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := required("volume_id", id, "staging_target_path", path); err != nil {
		return nil, err
	}
	release, err := n.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	if err := n.unstageLocked(ctx, id, path); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unstageLocked undoes the stage of id at path; the caller holds the volume's lock.
func (n *node) unstageLocked(ctx context.Context, id, path string) error {
	s := n.stage(id)
	ref, rerr := n.resolve(id)
	if s == nil {
		return rerr
	}
	if s.StagingPath != filepath.Clean(path) {
		return nil
	}
	if pubs := n.publishesOf(id); len(pubs) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is still published at %s", id, pubs[0].TargetPath)
	}
	if rerr != nil {
		ref = nil // the bytes are gone; still release the mount and the device
	}
	// Mark the record first, so that a restart finishes an interrupted unstage instead of
	// repairing the stage.
	s.Phase = state.PhaseRemoving
	if err := n.putStage(s); err != nil {
		return err
	}
	if err := n.teardownStage(ctx, ref, s); err != nil {
		return status.Errorf(codes.Internal, "unstage volume %s: %v", id, err)
	}
	if err := n.update(func(st *state.Node) { delete(st.Stages, id) }); err != nil {
		return err
	}
	klogFrom(ctx, n.log).V(2).Info("Unstaged volume", "volumeID", id, "path", s.StagingPath)
	return nil
}

// ownStagingPath is where a driver running --without staging stages a volume for its
// NodePublishVolume: the CO gives it no staging path.
func (n *node) ownStagingPath(id string) string {
	return filepath.Join(n.cfg.StateDir, "publish-staging", id)
}

// withNoUUID are the flags of a filesystem's mount. A restored snapshot or a
// clone is a copy of its source's filesystem, UUID included, and xfs refuses to mount a
// second filesystem with the UUID of a mounted one: xfs is mounted with nouuid, as the
// cloud block drivers do, so that a volume and its copy can be used at once.
func withNoUUID(fsType string, flags []string) []string {
	if fsType != "xfs" || slices.Contains(flags, "nouuid") {
		return flags
	}
	return append(slices.Clone(flags), "nouuid")
}

// growUnmounted grows an ext2/3/4 filesystem that is smaller than its device before the
// device is mounted: the image was lengthened while the volume was not staged (offline
// expansion), or restored from a smaller snapshot or cloned from a smaller volume into a
// larger claim. Offline, resize2fs grows by any factor and needs no CAP_SYS_RESOURCE;
// online it is limited by the group descriptor blocks mkfs reserved, so a 1 MiB image
// restored into a 1 GiB claim could not grow, and the kernel refuses it outright without
// that capability. resize2fs wants a clean check first, as the kubelet's ResizeFs rule
// for unmounted filesystems does.
func (n *node) growUnmounted(device, stagingPath string) error {
	format, err := n.mounter.GetDiskFormat(device)
	if err != nil || !strings.HasPrefix(format, "ext") {
		return nil // unformatted (FormatAndMount formats it), xfs, or unreadable: nothing to do here
	}
	if need, err := n.resizer.NeedResize(device, stagingPath); err != nil || !need {
		return nil
	}
	// e2fsck exits 1 when it corrected something, which leaves the filesystem clean.
	if out, err := n.mounter.Exec.Command("e2fsck", "-f", "-p", device).CombinedOutput(); err != nil {
		var exit utilexec.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() > 1 {
			return fmt.Errorf("check filesystem of %s before growing it: %v: %s", device, err, out)
		}
	}
	if out, err := n.mounter.Exec.Command("resize2fs", device).CombinedOutput(); err != nil {
		return fmt.Errorf("grow filesystem of %s: %v: %s", device, err, out)
	}
	return nil
}
