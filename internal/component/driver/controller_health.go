package driver

import (
	"context"
	"fmt"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// volumeHealth checks what the controller can see of a volume: its bytes exist and, for an
// image, have the recorded length.
func (c *controller) volumeHealth(v *state.Volume) *csi.VolumeHealth {
	h := &csi.VolumeHealth{VolumeId: v.ID}
	path := c.backends[v.Type].VolumePath(v.ID)
	fi, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
		h.HealthStatuses = append(h.HealthStatuses, healthEntry(csi.VolumeHealthErrorType_DATA_LOSS, "DataMissing", "volume data %s does not exist", path))
	case err != nil:
		h.HealthStatuses = append(h.HealthStatuses, healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, "DataUnreadable", "stat %s: %v", path, err))
	case v.Type == state.TypeBlock && fi.Size() < v.CapacityBytes:
		h.HealthStatuses = append(h.HealthStatuses, healthEntry(csi.VolumeHealthErrorType_DEGRADED, "ImageTruncated", "image %s holds %d bytes, the volume %d", path, fi.Size(), v.CapacityBytes))
	}
	return h
}

func healthEntry(t csi.VolumeHealthErrorType, reason, format string, args ...any) *csi.VolumeHealth_VolumeHealthEntry {
	return &csi.VolumeHealth_VolumeHealthEntry{Status: t, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func (c *controller) ControllerGetVolumeHealth(_ context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	v := c.volume(req.GetVolumeId())
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: c.volumeHealth(v)}, nil
}

func (c *controller) ControllerListVolumeHealth(_ context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	c.mu.Lock()
	page, next, err := paginate(c.st.SortedVolumeIDs(), req.GetStartingToken(), req.GetMaxEntries())
	vols := make([]*state.Volume, 0, len(page))
	for _, id := range page {
		vols = append(vols, c.st.Volumes[id].Clone())
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	resp := &csi.ControllerListVolumeHealthResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, c.volumeHealth(v))
	}
	return resp, nil
}
