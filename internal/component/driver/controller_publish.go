package driver

import (
	"cmp"
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// Publish context keys returned by ControllerPublishVolume, for the node to check.
const (
	PublishContextType = "kubevol.io/type"
	PublishContextNode = "kubevol.io/node"
)

// ControllerPublishVolume records that a volume is attached to the node. The bytes of a
// kubevol volume are already on the node's disk, so "attach" is a record, with the checks
// the spec asks of a real attach: the node exists, the attach limit, compatibility.
func (c *controller) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, nodeID := req.GetVolumeId(), req.GetNodeId()
	if err := requiredWithCapability(req.GetVolumeCapability(), "volume_id", id, "node_id", nodeID); err != nil {
		return nil, err
	}
	v, err := c.lockVolumeForRecord(id)
	if err != nil {
		return nil, err
	}
	defer v.unlock()
	// A local volume is reachable from its own node only, a network one from every node
	// the controller serves.
	if owner := cmp.Or(v.Node, c.cfg.NodeID); !v.Network && nodeID != owner {
		return nil, status.Errorf(codes.NotFound, "node %q not found: volume %s lives on node %q", nodeID, id, owner)
	}
	if v.Network && !c.cfg.servesSegment(nodeID) {
		return nil, status.Errorf(codes.NotFound, "node %q not found: the driver serves %s", nodeID, c.cfg.servedNodes())
	}
	if r := c.cfg.off.unsupported(v.Type, v.Network, req.GetVolumeCapability()); r != "" {
		return nil, status.Error(codes.InvalidArgument, r)
	}
	// The attach of a network disk: one that is not multi-node stays on one node until it
	// is unpublished there (CSI: FAILED_PRECONDITION, published at another node without a
	// MULTI_NODE capability). A force-detach (out-of-service) unpublishes the lost node.
	if !multiNode(req.GetVolumeCapability().GetAccessMode().GetMode()) {
		for other := range v.Attachments {
			if other != nodeID {
				return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published at node %q and its access mode is single-node", id, other)
			}
		}
	}
	want := state.Attachment{
		ReadOnly:   req.GetReadonly(),
		AccessMode: int32(req.GetVolumeCapability().GetAccessMode().GetMode()),
		Block:      req.GetVolumeCapability().GetBlock() != nil,
	}
	resp := &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{
		PublishContextType: v.Type,
		PublishContextNode: nodeID,
	}}
	if have, ok := v.Attachments[nodeID]; ok {
		if have != want {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is already published to node %q with a different capability or readonly flag", id, nodeID)
		}
		return resp, nil
	}
	if limit := c.cfg.MaxVolumesPerNode; limit > 0 && c.attachedToLocked(nodeID) >= limit {
		return nil, status.Errorf(codes.ResourceExhausted, "node %q already has the maximum of %d volumes published", nodeID, limit)
	}
	if v.Attachments == nil {
		v.Attachments = map[string]state.Attachment{}
	}
	v.Attachments[nodeID] = want
	if err := v.commit(); err != nil {
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Published volume", "volumeID", id, "nodeID", nodeID)
	return resp, nil
}

func (c *controller) attachedToLocked(nodeID string) int64 {
	var n int64
	for _, v := range c.st.Volumes {
		if _, ok := v.Attachments[nodeID]; ok {
			n++
		}
	}
	return n
}

// ControllerUnpublishVolume removes the attach record. CSI: a volume or node that is
// unknown can be regarded as unpublished, which is OK.
func (c *controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, nodeID := req.GetVolumeId(), req.GetNodeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	// The attach record alone changes: shared with the copies that read the volume.
	release, err := c.locks.hold(nil, []string{volumeKey(id)})
	if err != nil {
		return nil, err
	}
	defer release()

	c.mu.Lock()
	v := c.st.Volumes[id]
	published := false
	if v != nil {
		_, published = v.Attachments[nodeID]
		published = published || (nodeID == "" && len(v.Attachments) > 0)
	}
	if !published {
		c.mu.Unlock()
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if nodeID == "" {
		clear(v.Attachments) // CSI: an empty node_id unpublishes from every node
	} else {
		delete(v.Attachments, nodeID)
	}
	if err := c.commitUnlock(); err != nil {
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Unpublished volume", "volumeID", id, "nodeID", nodeID)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
