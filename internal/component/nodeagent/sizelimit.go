package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/sizes"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins/emptydir"
)

// ReasonSizeLimitExceeded is the event on a pod whose disk-backed emptyDir outgrew its
// sizeLimit.
const ReasonSizeLimitExceeded = "EmptyDirSizeLimitExceeded"

// runEmptyDirLimits reports disk-backed emptyDirs whose usage exceeds their sizeLimit. The
// kubelet enforces that limit by evicting the pod; without containers to stop, the agent
// reports it: a Warning event (with upstream's eviction message) and a log line, once per
// crossing. A memory-backed emptyDir needs none of this: its tmpfs size is the limit. Only
// volumes with a sizeLimit are walked, every interval.
func (a *Agent) runEmptyDirLimits(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	paths := volume.Paths{Root: a.cfg.RootDir}
	exceeded := map[string]bool{}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		seen := map[string]bool{}
		dsw := a.manager.DesiredState()
		for _, uid := range dsw.PodUIDs() {
			pod := dsw.Pod(uid)
			for _, dv := range dsw.PodVolumes(uid) {
				ed := emptyDirWithLimit(dv.Spec)
				if pod == nil || ed == nil {
					continue
				}
				key := string(uid) + "/" + dv.Spec.Name()
				seen[key] = true
				used := diskUsage(paths.PodVolumeDir(uid, emptydir.PluginName, dv.Spec.Name()))
				over := overLimit(used, *ed.SizeLimit)
				if over && !exceeded[key] {
					msg := fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q.", dv.OuterNames[0], ed.SizeLimit.String())
					a.recorder.Event(pod, v1.EventTypeWarning, ReasonSizeLimitExceeded, msg)
					logger.Info("EmptyDir over its sizeLimit", "pod", klog.KObj(pod), "volume", dv.OuterNames[0], "usedBytes", used, "limit", ed.SizeLimit.String())
				}
				exceeded[key] = over
			}
		}
		for key := range exceeded {
			if !seen[key] {
				delete(exceeded, key)
			}
		}
	}
}

// overLimit is the kubelet's used > sizeLimit. Value() would turn a limit beyond int64 into
// 0 or a negative number, so that every emptyDir would be reported over it; no usage can
// exceed such a limit.
func overLimit(used int64, limit resource.Quantity) bool {
	if _, err := sizes.Bytes("sizeLimit", limit); err != nil {
		return false // not positive (no limit) or beyond any usage
	}
	// Exact, for a fractional limit too; cheap now that the limit is known to be small.
	return resource.NewQuantity(used, resource.BinarySI).Cmp(limit) > 0
}

func emptyDirWithLimit(spec *volume.Spec) *v1.EmptyDirVolumeSource {
	if spec == nil || spec.Volume == nil || spec.Volume.EmptyDir == nil {
		return nil
	}
	ed := spec.Volume.EmptyDir
	if ed.Medium != v1.StorageMediumDefault || ed.SizeLimit == nil || ed.SizeLimit.IsZero() {
		return nil
	}
	return ed
}

// diskUsage is what du reports: allocated blocks, each inode once.
func diskUsage(dir string) int64 {
	var total int64
	inodes := map[uint64]bool{}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && !inodes[st.Ino] {
			inodes[st.Ino] = true
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}
