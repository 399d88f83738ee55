package driver

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// Mutable parameters: what a VolumeAttributesClass may set at CreateVolume
// (mutable_parameters) and change later with ControllerModifyVolume.
const (
	// MutableReadOnly ("true" or "false") makes every publish of the volume read-only: new
	// publishes are mounted ro, and a driver serving both services (--mode all) remounts
	// the volume's live publishes at once. The node's mount table shows it, and a write
	// through the mount fails with EROFS.
	MutableReadOnly = "readOnly"
)

// extraModifyPrefix is the reserved prefix of the keys a CO may add to the parameters
// (external-resizer's --extra-modify-metadata: csi.storage.k8s.io/pvc/name, pvc/namespace,
// pv/name); the driver accepts and ignores them.
const extraModifyPrefix = "csi.storage.k8s.io/"

// validateMutable checks mutable parameters. An unknown key or a bad value is
// INVALID_ARGUMENT, which a CO reads as infeasible (external-resizer: the claim's
// modifyVolumeStatus becomes Infeasible).
func validateMutable(p map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(p)) {
		v := p[k]
		switch {
		case k == MutableReadOnly:
			if v != "true" && v != "false" {
				return status.Errorf(codes.InvalidArgument, "mutable parameter %s=%q: want \"true\" or \"false\"", k, v)
			}
		case strings.HasPrefix(k, extraModifyPrefix):
		default:
			return status.Errorf(codes.InvalidArgument, "unknown mutable parameter %q: the driver knows only %s", k, MutableReadOnly)
		}
	}
	return nil
}

// recordedMutable is what a volume record keeps of mutable parameters: the driver's own
// keys, never the CO's metadata.
func recordedMutable(p map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		if !strings.HasPrefix(k, extraModifyPrefix) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// reportMutable adds the volume's current mutable parameters to the volume context that
// ListVolumes and ControllerGetVolume report (not CreateVolume's: the CO copies that one into
// the PV, where it would go stale at the first modification).
func reportMutable(out *csi.Volume, v *state.Volume) *csi.Volume {
	for k, val := range v.MutableParameters {
		out.VolumeContext[k] = val
	}
	return out
}

// readOnlyParam reports whether mutable parameters make a volume read-only.
func readOnlyParam(p map[string]string) bool { return p[MutableReadOnly] == "true" }

// ControllerModifyVolume changes a volume's mutable parameters. The record is durable
// before the answer; the keys not named keep their values (CSI: only the given parameters
// change). With both services in one process the live publishes follow at once.
func (c *controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	if err := validateMutable(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	v, err := c.lockVolume(id)
	if err != nil {
		return nil, err
	}
	// The volume's in-flight lock is held until the publishes follow, so no publish or
	// unpublish of the volume runs in between.
	defer v.unlock()
	merged := maps.Clone(v.MutableParameters)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, recordedMutable(req.GetMutableParameters()))
	if len(merged) == 0 {
		merged = nil
	}
	if !maps.Equal(merged, v.MutableParameters) {
		v.MutableParameters = merged
		if err := v.commit(); err != nil {
			return nil, err
		}
	} else {
		v.held = false
		c.mu.Unlock()
	}
	klogFrom(ctx, c.log).V(2).Info("Modified volume", "volumeID", id, "mutableParameters", merged)
	if c.modified != nil {
		if err := c.modified(ctx, id, merged); err != nil {
			// The record holds the new parameters; the CO's retry applies them again.
			return nil, status.Errorf(codes.Internal, "apply the new parameters to the publishes of volume %s: %v", id, err)
		}
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}
