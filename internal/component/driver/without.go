package driver

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Capability names for Config.Without: each switches one capability off, so that a CO can
// be tested against drivers that lack it. Attach is the other way round (off unless
// AttachRequired).
const (
	// WithoutStaging drops the node's STAGE_UNSTAGE_VOLUME: NodePublishVolume then mounts
	// the volume by itself, and NodeUnpublishVolume releases it with its last target.
	WithoutStaging = "staging"
	// WithoutPluginExpansion drops the VolumeExpansion plugin capabilities (ONLINE and
	// OFFLINE), which CSI makes optional even for a driver that expands.
	WithoutPluginExpansion = "plugin-expansion"
	// WithoutControllerExpansion drops the controller's EXPAND_VOLUME: the node's
	// NodeExpandVolume grows the volume itself (node-only expansion; needs --mode all).
	WithoutControllerExpansion = "controller-expansion"
	// WithoutListVolumes drops LIST_VOLUMES (and LIST_VOLUMES_PUBLISHED_NODES).
	WithoutListVolumes = "list-volumes"
	// WithoutGetCapacity drops GET_CAPACITY.
	WithoutGetCapacity = "get-capacity"
	// WithoutSnapshots drops CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS and GET_SNAPSHOT, and
	// refuses a snapshot as a volume's content source.
	WithoutSnapshots = "snapshots"
	// WithoutGroupSnapshots drops the GroupController service (CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT):
	// the plugin capability GROUP_CONTROLLER_SERVICE goes and its RPCs answer UNIMPLEMENTED.
	WithoutGroupSnapshots = "group-snapshots"
	// WithoutBlock refuses raw block access in every call that takes a capability.
	WithoutBlock = "block"
	// WithoutModify drops MODIFY_VOLUME: ControllerModifyVolume answers UNIMPLEMENTED and
	// CreateVolume refuses mutable_parameters.
	WithoutModify = "modify"
)

// WithoutNames lists every name Config.Without accepts.
var WithoutNames = []string{WithoutStaging, WithoutPluginExpansion, WithoutControllerExpansion,
	WithoutListVolumes, WithoutGetCapacity, WithoutSnapshots, WithoutGroupSnapshots, WithoutBlock, WithoutModify}

// without is the parsed Config.Without.
type without map[string]bool

func parseWithout(names []string) (without, error) {
	w := without{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(WithoutNames, n) {
			return nil, fmt.Errorf("--without %q: want some of %s", n, strings.Join(WithoutNames, ","))
		}
		w[n] = true
	}
	return w, nil
}

func (w without) String() string {
	var out []string
	for n := range w {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// controllerRPCOff maps a switched-off capability to the controller RPC types it removes.
var controllerRPCOff = map[string][]csi.ControllerServiceCapability_RPC_Type{
	WithoutControllerExpansion: {csi.ControllerServiceCapability_RPC_EXPAND_VOLUME},
	WithoutListVolumes:         {csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES},
	WithoutGetCapacity:         {csi.ControllerServiceCapability_RPC_GET_CAPACITY},
	WithoutSnapshots: {csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT},
	WithoutModify: {csi.ControllerServiceCapability_RPC_MODIFY_VOLUME},
}

// methodsOff maps a switched-off capability to the RPCs that then answer UNIMPLEMENTED, as
// CSI asks of a plugin that does not advertise the capability.
var methodsOff = map[string][]string{
	WithoutStaging:             {"NodeStageVolume", "NodeUnstageVolume"},
	WithoutControllerExpansion: {"ControllerExpandVolume"},
	WithoutListVolumes:         {"ListVolumes"},
	WithoutGetCapacity:         {"GetCapacity"},
	WithoutSnapshots: {"CreateSnapshot", "DeleteSnapshot", "ListSnapshots", "GetSnapshot",
		"CreateVolumeGroupSnapshot", "DeleteVolumeGroupSnapshot", "GetVolumeGroupSnapshot"},
	WithoutGroupSnapshots: {"GroupControllerGetCapabilities", "CreateVolumeGroupSnapshot", "DeleteVolumeGroupSnapshot", "GetVolumeGroupSnapshot"},
	WithoutModify:         {"ControllerModifyVolume"},
}

func (w without) filterController(caps []csi.ControllerServiceCapability_RPC_Type) []csi.ControllerServiceCapability_RPC_Type {
	return slices.DeleteFunc(caps, func(t csi.ControllerServiceCapability_RPC_Type) bool {
		for n := range w {
			if slices.Contains(controllerRPCOff[n], t) {
				return true
			}
		}
		return false
	})
}

// unimplemented is the UNIMPLEMENTED error of a method switched off, or nil.
func (w without) unimplemented(method string) error {
	for n := range w {
		if slices.Contains(methodsOff[n], method) {
			return status.Errorf(codes.Unimplemented, "%s: the driver runs --without %s", method, n)
		}
	}
	return nil
}

// refusedAccess is the reason a capability is refused by a switch, or "".
func (w without) refusedAccess(c *csi.VolumeCapability) string {
	if w[WithoutBlock] && c.GetBlock() != nil {
		return "raw block access: the driver runs --without block"
	}
	return ""
}
