package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/runtime/sizes"
	"github.com/kubevol/kubevol/pkg/volume"
)

// NodeExpand implements volume.ExpandablePlugin: NodeExpandVolume on the pod's publish path
// (the mount directory, or the published device file of a block volume), with the staging
// path and the PV's node-expand secret, as the kubelet's csi_expander. A driver without the
// node EXPAND_VOLUME capability has nothing to do on the node.
func (p *csiPlugin) NodeExpand(ctx context.Context, spec *volume.Spec, podUID types.UID, newSize resource.Quantity) error {
	src, err := sourceOf(spec)
	if err != nil {
		return err
	}
	node, caps, err := p.nodeClient(ctx, src.driver)
	if err != nil {
		return err
	}
	if !caps[csipb.NodeServiceCapability_RPC_EXPAND_VOLUME] {
		return nil
	}
	bytes, err := sizes.Bytes("PV capacity", newSize)
	if err != nil {
		// OutOfRange, as a driver would answer: the expansion is infeasible, not retried.
		return status.Error(codes.OutOfRange, err.Error())
	}
	secrets, err := p.secrets(ctx, src.expandSecret)
	if err != nil {
		return err
	}
	path := TargetPath(p.host.Paths(), podUID, spec.Name(), src.block)
	staging := ""
	if caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		staging = p.stagingPath(spec, src)
	}
	_, err = node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: src.handle, VolumePath: path, StagingTargetPath: staging,
		CapacityRange:    &csipb.CapacityRange{RequiredBytes: bytes},
		VolumeCapability: src.capability("", "", caps), Secrets: secrets,
	})
	return err
}
