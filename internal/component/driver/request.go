package driver

import (
	"fmt"
	"math"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// StorageClass parameters and volume context keys the driver understands.
const (
	ParamType = "type"
	// ParamPlacement chooses where a volume is reachable: PlacementNode (the default), on
	// the one node it is provisioned on; PlacementNetwork, from every node of the machine,
	// as network storage: no topology, multi-node access modes offered.
	ParamPlacement = "placement"
	// ParamFsType is the external-provisioner's reserved key; ParamFsTypeShort is the
	// in-tree style key users also write.
	ParamFsType      = "csi.storage.k8s.io/fstype"
	ParamFsTypeShort = "fsType"
	// ContextEphemeral marks an inline ephemeral volume in NodePublishVolume.
	ContextEphemeral = "csi.storage.k8s.io/ephemeral"
	// ContextSize is the size of an inline ephemeral volume, as a resource quantity.
	ContextSize = "size"
)

const (
	defaultFsType = "ext4"
	// sizeAlign keeps images a whole number of 4 KiB blocks, which loop devices and
	// filesystems expect.
	sizeAlign int64 = 4096
	// minBlockSize is the smallest image; xfs refuses filesystems under 300 MiB.
	minBlockSize int64 = 1 << 20
	minXFSSize   int64 = 300 << 20
	// maxSize is the largest size the driver records: the largest int64 that is a whole
	// number of blocks. Anything above it is OUT_OF_RANGE, before any arithmetic on it.
	maxSize int64 = math.MaxInt64 &^ (sizeAlign - 1)
)

var supportedFsTypes = []string{"ext4", "xfs"}

// Placements, the values of ParamPlacement.
const (
	PlacementNode    = "node"
	PlacementNetwork = "network"
)

// volumeParams is the decoded form of the CreateVolume parameters.
type volumeParams struct {
	typ    string
	fsType string
	// network: the volume is reachable from every node (placement "network").
	network bool
}

func parseParams(p map[string]string) (volumeParams, error) {
	vp := volumeParams{typ: state.TypeDir}
	if t, ok := p[ParamType]; ok {
		if t != state.TypeDir && t != state.TypeBlock {
			return vp, status.Errorf(codes.InvalidArgument, "parameter %s=%q: want %q or %q", ParamType, t, state.TypeDir, state.TypeBlock)
		}
		vp.typ = t
	}
	switch pl := p[ParamPlacement]; pl {
	case "", PlacementNode:
	case PlacementNetwork:
		vp.network = true
	default:
		return vp, status.Errorf(codes.InvalidArgument, "parameter %s=%q: want %q or %q", ParamPlacement, pl, PlacementNode, PlacementNetwork)
	}
	for _, k := range []string{ParamFsType, ParamFsTypeShort} {
		if fs, ok := p[k]; ok && fs != "" {
			if !slices.Contains(supportedFsTypes, fs) {
				return vp, status.Errorf(codes.InvalidArgument, "parameter %s=%q: want one of %v", k, fs, supportedFsTypes)
			}
			vp.fsType = fs
		}
	}
	return vp, nil
}

// capabilityFsType is the filesystem a new volume will get, by the rule NodeStageVolume
// formats it with (fsTypeOf: a mount capability's fs_type before the class's fsType
// parameter), so the volume is sized for the filesystem it will really have. The
// external-provisioner takes csi.storage.k8s.io/fstype out of the parameters and passes it
// only as the capability's fs_type, so sizing by the parameter alone made an xfs volume of a
// 1 MiB claim 1 MiB, and its stage failed ("size 256 of data subvolume is too small").
func capabilityFsType(param string, caps []*csi.VolumeCapability) string {
	for _, c := range caps {
		if c.GetMount().GetFsType() != "" {
			return fsTypeOf(c, param)
		}
	}
	return fsTypeOf(nil, param)
}

// minSize is the smallest volume of a type and filesystem.
func minSize(typ, fsType string) int64 {
	switch {
	case typ != state.TypeBlock:
		return sizeAlign
	case fsType == "xfs":
		return minXFSSize
	}
	return minBlockSize
}

// volumeSize picks the size of a new volume within the capacity range, following CSI
// CapacityRange: at least required_bytes, at most limit_bytes; OUT_OF_RANGE otherwise.
// floor is the smallest acceptable size (a type minimum, or the size of the source).
func volumeSize(cr *csi.CapacityRange, floor int64) (int64, error) {
	req, lim := cr.GetRequiredBytes(), cr.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity_range: negative bytes")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: required_bytes %d exceeds limit_bytes %d", req, lim)
	}
	size := req
	if size == 0 {
		size = DefaultVolumeSize
		if lim > 0 && lim < size {
			size = lim
		}
	}
	size = max(size, floor)
	if size > maxSize {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: %d bytes exceeds the largest volume, %d bytes", size, maxSize)
	}
	size = (size + sizeAlign - 1) / sizeAlign * sizeAlign
	if lim > 0 && size > lim {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: limit_bytes %d is below the smallest possible volume of %d bytes", lim, size)
	}
	return size, nil
}

// sizeFits reports whether an existing size satisfies a capacity range, for idempotent
// CreateVolume and ControllerExpandVolume.
func sizeFits(size int64, cr *csi.CapacityRange) bool {
	if cr.GetRequiredBytes() > size {
		return false
	}
	return cr.GetLimitBytes() == 0 || size <= cr.GetLimitBytes()
}

// validateCapabilities checks that capabilities are well formed (INVALID_ARGUMENT if not).
func validateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range caps {
		if err := validateCapability(c); err != nil {
			return err
		}
	}
	return nil
}

// requiredWithCapability is the preamble of the calls that take one volume_capability, which
// CSI makes REQUIRED in each (ControllerPublishVolume, NodeStageVolume, NodePublishVolume):
// the named fields, then the capability, INVALID_ARGUMENT for the first one missing.
func requiredWithCapability(c *csi.VolumeCapability, nameValues ...string) error {
	if err := required(nameValues...); err != nil {
		return err
	}
	return validateCapability(c)
}

func validateCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return status.Error(codes.InvalidArgument, "volume_capability.access_mode is required")
	}
	if c.GetBlock() == nil && c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "volume_capability.access_type is required")
	}
	return nil
}

// unsupportedReason says why a volume of type typ, on the network or not, cannot honour a
// capability, or "". A node-local volume has single-node modes only. A network volume has
// every mode, except that a filesystem on a "block" image is mounted by one node at a
// time: ext4 and xfs are not cluster filesystems (a network disk's raw block device, like
// a "dir" volume, may be shared).
func unsupportedReason(typ string, network bool, c *csi.VolumeCapability) string {
	if multiNode(c.GetAccessMode().GetMode()) {
		switch {
		case !network:
			return fmt.Sprintf("access mode %s: kubevol volumes are local to one node unless %s=%s", c.GetAccessMode().GetMode(), ParamPlacement, PlacementNetwork)
		case typ == state.TypeBlock && c.GetBlock() == nil:
			return fmt.Sprintf("access mode %s: a filesystem on a %q volume is mounted by one node at a time; share it as raw block or use type %q", c.GetAccessMode().GetMode(), state.TypeBlock, state.TypeDir)
		}
	}
	if c.GetBlock() != nil && typ != state.TypeBlock {
		return fmt.Sprintf("raw block access needs a volume of type %q, not %q", state.TypeBlock, typ)
	}
	if fs := c.GetMount().GetFsType(); fs != "" && typ == state.TypeBlock && !slices.Contains(supportedFsTypes, fs) {
		return fmt.Sprintf("fs_type %q: want one of %v", fs, supportedFsTypes)
	}
	return ""
}

func multiNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// unsupported is unsupportedReason plus the capabilities switched off.
func (w without) unsupported(typ string, network bool, c *csi.VolumeCapability) string {
	if r := w.refusedAccess(c); r != "" {
		return r
	}
	return unsupportedReason(typ, network, c)
}

// firstUnsupported returns the reason the first unsupported capability fails, or "".
func (w without) firstUnsupported(typ string, network bool, caps []*csi.VolumeCapability) string {
	for _, c := range caps {
		if r := w.unsupported(typ, network, c); r != "" {
			return r
		}
	}
	return ""
}

// required takes pairs of field name and value and returns INVALID_ARGUMENT for the first
// empty one: CSI's answer to a missing required field.
func required(nameValues ...string) error {
	for i := 0; i+1 < len(nameValues); i += 2 {
		if nameValues[i+1] == "" {
			return status.Errorf(codes.InvalidArgument, "%s is required", nameValues[i])
		}
	}
	return nil
}
