package csidrivers

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"
)

// RefreshAllocatable asks the registered driver name for NodeGetInfo again and writes its
// max_volumes_per_node to the CSINode's allocatable count (mutable CSINode allocatable
// count, GA in 1.36): periodically, and when an attach failed with ResourceExhausted.
func (r *Registry) RefreshAllocatable(ctx context.Context, name string) error {
	r.mu.Lock()
	conn, drv, ok := r.conns[name], r.drivers[name], r.conns[name] != nil
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	cctx, cancel := conn.WithTimeout(ctx)
	defer cancel()
	info, err := conn.Node.NodeGetInfo(cctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("NodeGetInfo of driver %s: %w", name, err)
	}
	if info.GetMaxVolumesPerNode() == drv.MaxVolumes {
		return nil
	}
	old := drv.MaxVolumes
	drv.MaxVolumes = info.GetMaxVolumesPerNode()
	if err := r.nodes.Install(ctx, drv); err != nil {
		return err
	}
	r.mu.Lock()
	if r.conns[name] == conn {
		r.drivers[name] = drv
	}
	r.mu.Unlock()
	klog.FromContext(ctx).Info("CSI driver's allocatable count updated", "driver", name, "old", old, "maxVolumes", drv.MaxVolumes)
	return nil
}

// RunAllocatableUpdates refreshes, until ctx ends, the allocatable count of each registered
// driver whose CSIDriver sets spec.nodeAllocatableUpdatePeriodSeconds, at that period (the
// kubelet's CSINode updater). A driver without the field is read only at registration.
func (r *Registry) RunAllocatableUpdates(ctx context.Context, csiDrivers storagelisters.CSIDriverLister) {
	last := map[string]time.Time{}
	tick := r.clock.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C():
		}
		r.mu.Lock()
		names := make([]string, 0, len(r.conns))
		for n := range r.conns {
			names = append(names, n)
		}
		r.mu.Unlock()
		for _, n := range names {
			d, err := csiDrivers.Get(n)
			if err != nil || d.Spec.NodeAllocatableUpdatePeriodSeconds == nil || *d.Spec.NodeAllocatableUpdatePeriodSeconds <= 0 {
				continue
			}
			period := time.Duration(*d.Spec.NodeAllocatableUpdatePeriodSeconds) * time.Second
			if t, ok := last[n]; ok && now.Sub(t) < period {
				continue
			}
			if _, ok := last[n]; !ok {
				last[n] = now // registration just read it
				continue
			}
			last[n] = now
			if err := r.RefreshAllocatable(ctx, n); err != nil {
				klog.FromContext(ctx).Error(err, "Cannot refresh the CSI driver's allocatable count", "driver", n)
			}
		}
	}
}
