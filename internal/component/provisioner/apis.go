package provisioner

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/kubevol/kubevol/internal/runtime/apicheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// The features the provisioner turns off on an apiserver that lacks their API.
const (
	classesFeature  = "VolumeAttributesClass parameters"
	capacityFeature = "capacity"
)

// checkAPIs asks the apiserver for the APIs this configuration uses: claims, volumes and
// classes always, CSINodes with topology; VolumeAttributesClasses (when the driver can
// modify volumes) and CSIStorageCapacities (--enable-capacity) are turned off when missing.
// Snapshot data sources are looked up per claim, so CRDs installed later are picked up.
func checkAPIs(ctx context.Context, sc *sidecar.Sidecar, cfg Config, caps *csiclient.Capabilities) (apicheck.Result, error) {
	required := []apicheck.Resource{apicheck.PersistentVolumes, apicheck.PersistentVolumeClaims, apicheck.StorageClasses}
	if caps.Plugin[csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS] {
		required = append(required, apicheck.CSINodes)
	}
	var features []apicheck.Feature
	if caps.Controller[csi.ControllerServiceCapability_RPC_MODIFY_VOLUME] {
		features = append(features, apicheck.Feature{Name: classesFeature, Needs: []apicheck.Resource{apicheck.VolumeAttributesClasses}})
	}
	if cfg.Capacity.Enabled {
		features = append(features, apicheck.Feature{Name: capacityFeature, Needs: []apicheck.Resource{apicheck.CSIStorageCapacities}})
	}
	return sc.CheckAPIs(ctx, "provisioner", required, features...)
}
