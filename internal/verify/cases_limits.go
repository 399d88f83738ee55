package verify

import (
	"context"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxLimitVolumes bounds the volumes the limits case makes to fill the node.
const maxLimitVolumes = 8

// volumeLimits: the driver's max_volumes_per_node is the node's CSINode allocatable count
// (upstream's volumeLimits "should verify that all csinodes have volume limits"); a pod
// that would take the node past it stays unschedulable with the scheduler's reason, and is
// scheduled once volumes are freed (upstream's "should support volume limits").
func volumeLimits(k *caseEnv) error {
	cn, err := k.cs.StorageV1().CSINodes().Get(k.ctx, k.node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var count *int32
	for _, d := range cn.Spec.Drivers {
		if d.Name == k.driver && d.Allocatable != nil {
			count = d.Allocatable.Count
		}
	}
	if k.conn != nil {
		cctx, cancel := k.conn.WithTimeout(k.ctx)
		info, err := k.conn.Node.NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeGetInfo: %w", err)
		}
		if err := checkLimit(count, info.GetMaxVolumesPerNode()); err != nil {
			return err
		}
	}
	if count == nil {
		return skip("the driver reports no max_volumes_per_node: the node has no volume limit for it")
	}
	limit := int(*count)
	if limit > maxLimitVolumes {
		return skip("the node's limit of %d volumes is more than the %d the case makes to reach it", limit, maxLimitVolumes)
	}
	var vols []corev1.Volume
	for i := range limit {
		name := fmt.Sprintf("fill-%d", i)
		if _, err := k.fsClaim(name, classWFFC); err != nil {
			return err
		}
		vols = append(vols, claimVolume(name, name))
	}
	if _, err := k.runPod("full", vols, nil, nil); err != nil {
		return fmt.Errorf("a pod with the node's limit of %d volumes: %w", limit, err)
	}
	if _, err := k.fsClaim("extra", classWFFC); err != nil {
		return err
	}
	extra, err := k.pod("extra", []corev1.Volume{claimVolume("extra", "extra")}, nil, nil)
	if err != nil {
		return err
	}
	if err := k.waitUnschedulable(extra.Name, "max volume count"); err != nil {
		return fmt.Errorf("a pod beyond the node's limit of %d volumes: %w", limit, err)
	}
	if err := k.deletePod("full"); err != nil {
		return err
	}
	_, err = k.ready(extra)
	return err
}

// checkLimit: the node's CSINode count is the driver's max_volumes_per_node (0: none).
func checkLimit(count *int32, maxVolumes int64) error {
	switch {
	case maxVolumes == 0 && count != nil:
		return fmt.Errorf("CSINode allocatable count %d, but the driver reports no max_volumes_per_node", *count)
	case maxVolumes > 0 && (count == nil || int64(*count) != maxVolumes):
		got := "none"
		if count != nil {
			got = fmt.Sprint(*count)
		}
		return fmt.Errorf("CSINode allocatable count %s, the driver's max_volumes_per_node is %d", got, maxVolumes)
	}
	return nil
}

// waitUnschedulable waits until a pod is reported unschedulable with a scheduler message
// containing text; a pod scheduled instead fails at once.
func (k *caseEnv) waitUnschedulable(pod, text string) error {
	var last string
	err := poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		p, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was scheduled to %s", pod, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				last = c.Message
				return strings.Contains(c.Message, text), nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("not unschedulable for %q: %w (scheduler: %q)", text, err, last)
	}
	return nil
}
