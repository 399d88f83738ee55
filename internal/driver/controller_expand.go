package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/driver/state"
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
	v, err := c.lockVolumeForSpace(id)
	if err != nil {
		return nil, err
	}
	defer v.unlock()
	if cp := req.GetVolumeCapability(); cp != nil {
		if r := unsupportedReason(v.Type, cp); r != "" {
			return nil, status.Error(codes.InvalidArgument, r)
		}
	}
	// An image needs the node to act: a staged loop device keeps its old size until the node
	// refreshes it, and a filesystem on it must then grow. A dir volume needs nothing.
	nodeExpand := v.Type == state.TypeBlock
	size, err := volumeSize(req.GetCapacityRange(), minSize(v.Type, v.FsType))
	if err != nil {
		return nil, err
	}
	if size <= v.CapacityBytes {
		// CSI: a volume already at or above the requested size is OK.
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.CapacityBytes, NodeExpansionRequired: nodeExpand}, nil
	}
	if err := c.fitsLocked(v.Type, size-v.CapacityBytes); err != nil {
		return nil, err
	}
	if err := c.backends[v.Type].ExpandVolume(id, size); err != nil {
		return nil, status.Errorf(dataErrorCode(err), "expand volume data: %v", err)
	}
	v.CapacityBytes = size
	if err := v.commit(); err != nil {
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Expanded volume", "volumeID", id, "bytes", size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: nodeExpand}, nil
}
