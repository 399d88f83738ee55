package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// ControllerExpandVolume grows a volume, published or not (ONLINE and OFFLINE expansion).
// A "block" image is lengthened here; the node then refreshes the loop device and, unless
// the volume is raw block, grows the filesystem. A "dir" volume only gets a bigger share of the pool.
func (c *controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	size, nodeExpand, err := c.expand(ctx, id, req.GetCapacityRange(), req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: nodeExpand}, nil
}

// expand grows the volume's bytes to the range and returns its size and whether the node
// must act.
func (c *controller) expand(ctx context.Context, id string, rng *csi.CapacityRange, cp *csi.VolumeCapability) (int64, bool, error) {
	v, err := c.lockVolumeForSpace(id)
	if err != nil {
		return 0, false, err
	}
	defer v.unlock()
	if cp != nil {
		if r := c.cfg.off.unsupported(v.Type, v.Network, cp); r != "" {
			return 0, false, status.Error(codes.InvalidArgument, r)
		}
	}
	// An image needs the node to act: a staged loop device keeps its old size until the node
	// refreshes it, and a filesystem on it must then grow. A dir volume needs nothing.
	nodeExpand := v.Type == state.TypeBlock
	size, err := volumeSize(rng, minSize(v.Type, v.FsType))
	if err != nil {
		return 0, false, err
	}
	if size <= v.CapacityBytes {
		// CSI: a volume already at or above the requested size is OK.
		return v.CapacityBytes, nodeExpand, nil
	}
	if err := c.fitsLocked(v.Type, size-v.CapacityBytes); err != nil {
		return 0, false, err
	}
	if err := c.backends[v.Type].ExpandVolume(id, size); err != nil {
		return 0, false, status.Errorf(dataErrorCode(err), "expand volume data: %v", err)
	}
	v.CapacityBytes = size
	if err := v.commit(); err != nil {
		return 0, false, err
	}
	klogFrom(ctx, c.log).V(2).Info("Expanded volume", "volumeID", id, "bytes", size)
	return size, nodeExpand, nil
}
