package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// shadow mounts, for a NodePublishVolume that succeeded and a Shadow rule, a fresh 1 MiB
// tmpfs over the filesystem target: the pod then writes to it and not to the volume. The
// driver's NodeUnpublishVolume unmounts everything stacked on the target, so nothing leaks.
func (f *faults) shadow(ctx context.Context, method string, req any) error {
	pub, ok := req.(*csi.NodePublishVolumeRequest)
	if f == nil || !ok || pub.GetVolumeCapability().GetBlock() != nil {
		return nil
	}
	for _, r := range f.rules {
		if r.Shadow && r.Method == method {
			klog.FromContext(ctx).Info("Injected fault: a tmpfs shadows the published volume", "target", pub.GetTargetPath())
			return mount.New("").Mount("tmpfs", pub.GetTargetPath(), "tmpfs", []string{"size=1m"})
		}
	}
	return nil
}
