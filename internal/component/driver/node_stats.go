package driver

import (
	"context"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// pathUse is how a volume is reachable at a path on this node.
type pathUse struct {
	block bool
	// stage is the volume's stage record, nil for an ephemeral volume.
	stage *state.Stage
}

// findPath checks that path is a staging path or a target of volume id. CSI
// NodeGetVolumeStats and NodeExpandVolume answer NOT_FOUND otherwise.
func (n *node) findPath(id, path string) (*pathUse, error) {
	path = filepath.Clean(path)
	s := n.stage(id)
	if s != nil && s.StagingPath == path {
		return &pathUse{block: s.Block, stage: s}, nil
	}
	if p := n.publish(path); p != nil && p.VolumeID == id {
		return &pathUse{block: p.Block, stage: s}, nil
	}
	return nil, status.Errorf(codes.NotFound, "volume %s is neither staged nor published at %s", id, path)
}

// NodeGetVolumeStats reports bytes and inodes. A filesystem on an image reports its own
// statfs; a "dir" volume shares the host filesystem, so its use is measured by walking it
// and its size is the capacity it was given.
func (n *node) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := required("volume_id", id, "volume_path", path); err != nil {
		return nil, err
	}
	ref, err := n.resolve(id)
	if err != nil {
		return nil, err
	}
	use, err := n.findPath(id, path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", path, err)
	}
	if use.block {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: ref.capacity}}}, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", path, err)
	}
	bsize := fs.Bsize
	bytes := &csi.VolumeUsage{Unit: csi.VolumeUsage_BYTES,
		Total: int64(fs.Blocks) * bsize, Available: int64(fs.Bavail) * bsize, Used: int64(fs.Blocks-fs.Bfree) * bsize}
	inodes := &csi.VolumeUsage{Unit: csi.VolumeUsage_INODES,
		Total: int64(fs.Files), Available: int64(fs.Ffree), Used: int64(fs.Files - fs.Ffree)}
	if ref.typ == state.TypeDir {
		used, files, err := backend.TreeUsage(ref.path)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "measure %s: %v", ref.path, err)
		}
		if ref.capacity > 0 {
			bytes.Total = ref.capacity
		}
		bytes.Used = used
		bytes.Available = max(0, min(bytes.Total-used, int64(fs.Bavail)*bsize))
		inodes.Used = files
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{bytes, inodes}}, nil
}

// NodeExpandVolume makes the node see a volume the controller lengthened: the loop device
// is refreshed and the filesystem grown, online (resize2fs on the device, xfs_growfs on the
// mount point, through mount-utils' ResizeFs).
func (n *node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := required("volume_id", id, "volume_path", path); err != nil {
		return nil, err
	}
	if n.grow != nil && req.GetCapacityRange() != nil {
		// Node-only expansion (--without controller-expansion): nobody called
		// ControllerExpandVolume, so the node grows the volume's bytes first.
		if _, _, err := n.grow(ctx, id, req.GetCapacityRange(), req.GetVolumeCapability()); err != nil {
			return nil, err
		}
	}
	ref, release, err := n.lockVolume(id)
	if err != nil {
		return nil, err
	}
	defer release()
	if vc := req.GetVolumeCapability(); vc != nil {
		if r := n.cfg.off.unsupported(ref.typ, ref.network, vc); r != "" {
			return nil, status.Error(codes.InvalidArgument, r)
		}
	}
	use, err := n.findPath(id, path)
	if err != nil {
		return nil, err
	}
	if req.GetCapacityRange().GetRequiredBytes() > ref.capacity && ref.capacity > 0 {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes; expand it with ControllerExpandVolume first", id, ref.capacity)
	}
	if ref.typ != state.TypeBlock || use.stage == nil {
		return &csi.NodeExpandVolumeResponse{CapacityBytes: ref.capacity}, nil
	}
	s := use.stage
	if err := n.loops.Refresh(ctx, s.Device); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if !s.Block {
		if _, err := n.resizer.Resize(s.Device, s.StagingPath); err != nil {
			return nil, status.Errorf(codes.Internal, "grow filesystem of %s: %v", id, err)
		}
	}
	klogFrom(ctx, n.log).V(2).Info("Expanded volume on node", "volumeID", id, "bytes", ref.capacity)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: ref.capacity}, nil
}
