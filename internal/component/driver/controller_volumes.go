package driver

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// Volume content sources as recorded in state.Volume.Source.
const (
	sourceSnapshot = "snapshot:"
	sourceVolume   = "volume:"
)

func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if err := required("name", req.GetName()); err != nil {
		return nil, err
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	params, err := parseParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	if len(req.GetMutableParameters()) > 0 && c.cfg.off[WithoutModify] {
		return nil, status.Error(codes.InvalidArgument, "mutable_parameters: the driver runs --without modify")
	}
	if err := validateMutable(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	if r := c.cfg.off.firstUnsupported(params.typ, params.network, req.GetVolumeCapabilities()); r != "" {
		return nil, status.Error(codes.InvalidArgument, r)
	}
	if req.GetVolumeContentSource().GetSnapshot() != nil && c.cfg.off[WithoutSnapshots] {
		return nil, status.Error(codes.InvalidArgument, "a snapshot as content source: the driver runs --without snapshots")
	}
	source, sourceKey, err := contentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	// The source is only read: it is shared with other copies and attach records of it.
	var shared []string
	if sourceKey != "" {
		shared = append(shared, sourceKey)
	}
	release, err := c.locks.hold([]string{volumeNameKey(req.GetName())}, shared)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := c.rollbackAbandoned(ctx, req.GetName()); err != nil {
		return nil, err
	}

	c.pool.mu.Lock()
	c.mu.Lock()
	if v := c.st.VolumeByName(req.GetName()); v != nil {
		v = v.Clone()
		c.mu.Unlock()
		c.pool.mu.Unlock()
		// CSI CreateVolume: the same name with compatible arguments returns the existing
		// volume; anything incompatible is ALREADY_EXISTS.
		if why := incompatibleVolume(v, req, params, source); why != "" {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with %s", req.GetName(), why)
		}
		return &csi.CreateVolumeResponse{Volume: c.csiVolume(v)}, nil
	}
	v, fromPath, err := c.planVolumeLocked(req, params, source)
	if err != nil {
		c.mu.Unlock()
		c.pool.mu.Unlock()
		return nil, err
	}
	// The intent is durable before any byte exists: a crash at any later point leaves a
	// record that names the data, and the restart rolls back exactly that.
	c.st.Volumes[v.ID] = v
	c.pool.mu.Unlock()
	if err := c.commitUnlock(); err != nil {
		return nil, err
	}
	b := c.backends[v.Type]
	if err := b.CreateVolume(v.ID, v.CapacityBytes, fromPath); err != nil {
		if rerr := c.finishDelete(v.ID, v.Type); rerr != nil {
			klogFrom(ctx, c.log).Error(rerr, "Rolling back a failed CreateVolume; the restart finishes it", "volumeID", v.ID)
		}
		return nil, status.Errorf(dataErrorCode(err), "create volume data: %v", err)
	}
	c.mu.Lock()
	c.st.Volumes[v.ID].Creating = false
	if err := c.commitUnlock(); err != nil {
		// The record still says creating on disk: the restart rolls it back.
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Created volume", "volumeID", v.ID, "name", v.Name, "type", v.Type, "bytes", v.CapacityBytes)
	return &csi.CreateVolumeResponse{Volume: c.csiVolume(v)}, nil
}

// planVolumeLocked checks that a new volume may be created and returns its record, in the
// creating state, and the path of its content source. The caller holds pool.mu and c.mu.
func (c *controller) planVolumeLocked(req *csi.CreateVolumeRequest, params volumeParams, source string) (*state.Volume, string, error) {
	node, ok := c.cfg.pickNode(req.GetAccessibilityRequirements())
	if params.network {
		// Network storage is reachable from every segment: any requirement is met.
		node, ok = "", true
	}
	if !ok {
		return nil, "", status.Errorf(codes.ResourceExhausted, "volumes can only be provisioned on %s", c.cfg.servedNodes())
	}
	floor, fromPath, err := c.sourceLocked(params.typ, source)
	if err != nil {
		return nil, "", err
	}
	size, err := volumeSize(req.GetCapacityRange(), max(floor, minSize(params.typ, capabilityFsType(params.fsType, req.GetVolumeCapabilities()))))
	if err != nil {
		return nil, "", err
	}
	if err := c.fitsLocked(params.typ, size); err != nil {
		return nil, "", err
	}
	return &state.Volume{
		ID:            newID("v-"),
		Name:          req.GetName(),
		Type:          params.typ,
		CapacityBytes: size,
		FsType:        params.fsType,
		Parameters:    maps.Clone(req.GetParameters()),
		// The class's mutable parameters hold from the start, as ControllerModifyVolume's.
		MutableParameters: recordedMutable(req.GetMutableParameters()),
		Source:            source,
		Node:              node,
		Network:           params.network,
		CreatedAt:         time.Now().UTC(),
		Creating:          true,
	}, fromPath, nil
}

// rollbackAbandoned rolls back an earlier CreateVolume of name that failed and could not
// roll itself back (its record still says creating), before the name is used again.
func (c *controller) rollbackAbandoned(ctx context.Context, name string) error {
	c.mu.Lock()
	v := c.st.VolumeByName(name).Clone()
	c.mu.Unlock()
	if v == nil || !v.Creating {
		return nil
	}
	return c.removeUnused(ctx, v)
}

// contentSource decodes a VolumeContentSource into the recorded form and the lock key of
// the source.
func contentSource(src *csi.VolumeContentSource) (recorded, lockKey string, err error) {
	switch {
	case src == nil:
		return "", "", nil
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		if id == "" {
			return "", "", status.Error(codes.InvalidArgument, "volume_content_source.snapshot.snapshot_id is required")
		}
		return sourceSnapshot + id, snapshotKey(id), nil
	case src.GetVolume() != nil:
		id := src.GetVolume().GetVolumeId()
		if id == "" {
			return "", "", status.Error(codes.InvalidArgument, "volume_content_source.volume.volume_id is required")
		}
		return sourceVolume + id, volumeKey(id), nil
	}
	return "", "", status.Error(codes.InvalidArgument, "volume_content_source: unknown type")
}

// sourceLocked resolves a content source to the smallest size a new volume may have and the
// path to copy from. Unknown sources are NOT_FOUND; a source of another backend type cannot
// be copied (INVALID_ARGUMENT).
func (c *controller) sourceLocked(typ, source string) (floor int64, fromPath string, err error) {
	if id, ok := strings.CutPrefix(source, sourceSnapshot); ok {
		sn := c.st.Snapshots[id]
		if sn == nil || sn.Creating {
			return 0, "", status.Errorf(codes.NotFound, "source snapshot %q not found", id)
		}
		if sn.Type != typ {
			return 0, "", status.Errorf(codes.InvalidArgument, "source snapshot %q is of type %q, the new volume of type %q", id, sn.Type, typ)
		}
		return sn.SizeBytes, c.backends[typ].SnapshotPath(id), nil
	}
	if id, ok := strings.CutPrefix(source, sourceVolume); ok {
		v := c.st.Volumes[id]
		if v == nil || v.Creating {
			return 0, "", status.Errorf(codes.NotFound, "source volume %q not found", id)
		}
		if v.Type != typ {
			return 0, "", status.Errorf(codes.InvalidArgument, "source volume %q is of type %q, the new volume of type %q", id, v.Type, typ)
		}
		return v.CapacityBytes, c.backends[typ].VolumePath(id), nil
	}
	return 0, "", nil
}

// incompatibleVolume says how an existing volume differs from a repeated CreateVolume.
func incompatibleVolume(v *state.Volume, req *csi.CreateVolumeRequest, p volumeParams, source string) string {
	switch {
	case !sizeFits(v.CapacityBytes, req.GetCapacityRange()):
		return "a capacity of " + itoa(v.CapacityBytes) + " bytes outside the requested range"
	case !maps.Equal(v.Parameters, req.GetParameters()) && !(len(v.Parameters) == 0 && len(req.GetParameters()) == 0):
		return "different parameters"
	case v.Source != source:
		return "a different content source"
	case v.Type != p.typ:
		return "a different type"
	}
	return ""
}

func (c *controller) csiVolume(v *state.Volume) *csi.Volume {
	out := &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.CapacityBytes,
		VolumeContext: map[string]string{ParamType: v.Type},
	}
	// A network volume has no topology: the CO may use it on any node (CSI: accessible
	// topology unset means accessible from all nodes).
	if !v.Network {
		out.AccessibleTopology = []*csi.Topology{{Segments: c.cfg.topologyOf(v.Node)}}
	}
	if v.FsType != "" {
		out.VolumeContext[ParamFsTypeShort] = v.FsType
	}
	if id, ok := strings.CutPrefix(v.Source, sourceSnapshot); ok {
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	} else if id, ok := strings.CutPrefix(v.Source, sourceVolume); ok {
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	return out
}

func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	release, err := c.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, err
	}
	defer release()
	v := c.volume(id)
	if v == nil {
		return &csi.DeleteVolumeResponse{}, nil // CSI: an unknown volume is already deleted
	}
	if len(v.Attachments) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published to node(s) %v", id, sortedKeys(v.Attachments))
	}
	why, err := c.inUse(ctx, v)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check whether volume %s is in use: %v", id, err)
	}
	if why != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is in use: %s", id, why)
	}
	// Intent, bytes, record: a crash after the intent leaves a record marked deleting, which
	// the restart (or the CO's retry) finishes; never a live-looking record without data.
	c.mu.Lock()
	c.st.Volumes[id].Deleting = true
	if err := c.commitUnlock(); err != nil {
		return nil, err
	}
	if err := c.finishDelete(id, v.Type); err != nil {
		return nil, err
	}
	klogFrom(ctx, c.log).V(2).Info("Deleted volume", "volumeID", id, "name", v.Name)
	return &csi.DeleteVolumeResponse{}, nil
}

// finishDelete removes a volume's bytes, then its record: DeleteVolume, and the rollback of
// a CreateVolume that its intent names.
func (c *controller) finishDelete(id, typ string) error {
	if err := c.backends[typ].DeleteVolume(id); err != nil {
		return status.Errorf(codes.Internal, "delete volume data: %v", err)
	}
	c.mu.Lock()
	delete(c.st.Volumes, id)
	return c.commitUnlock()
}

func (c *controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	v := c.volume(req.GetVolumeId())
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if r := c.cfg.off.firstUnsupported(v.Type, v.Network, req.GetVolumeCapabilities()); r != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: r}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *controller) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	resp := &csi.ListVolumesResponse{}
	err := c.readDurable(func() error {
		page, next, err := paginate(c.st.SortedVolumeIDs(), req.GetStartingToken(), req.GetMaxEntries())
		if err != nil {
			return err
		}
		resp.NextToken = next
		for _, id := range page {
			v := c.st.Volumes[id]
			resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
				Volume: reportMutable(c.csiVolume(v), v),
				Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: sortedKeys(v.Attachments)},
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (c *controller) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	var v *state.Volume
	if err := c.readDurable(func() error { v = c.st.Volumes[req.GetVolumeId()].Clone(); return nil }); err != nil {
		return nil, err
	}
	if v == nil || v.Creating {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: reportMutable(c.csiVolume(v), v),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: sortedKeys(v.Attachments)},
	}, nil
}

func (c *controller) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	params, err := parseParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	// Capacity is per topology segment: only the served nodes' segments have any (one pool).
	if seg := req.GetAccessibleTopology().GetSegments(); len(seg) > 0 && !c.cfg.servesSegment(seg[TopologyKey]) {
		return &csi.GetCapacityResponse{}, nil
	}
	if c.cfg.off.firstUnsupported(params.typ, params.network, req.GetVolumeCapabilities()) != "" {
		return &csi.GetCapacityResponse{}, nil
	}
	c.mu.Lock()
	free, err := c.freeBytesLocked(params.typ)
	c.mu.Unlock()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "capacity: %v", err)
	}
	free = free / sizeAlign * sizeAlign
	return &csi.GetCapacityResponse{
		AvailableCapacity: free,
		MaximumVolumeSize: wrapInt64(free),
		MinimumVolumeSize: wrapInt64(minSize(params.typ, params.fsType)),
	}, nil
}
