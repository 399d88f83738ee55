package verify

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
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
		vols = append(vols, kubecheck.ClaimVolume(name, name))
	}
	if _, err := k.runPod("full", vols, nil, nil); err != nil {
		return fmt.Errorf("a pod with the node's limit of %d volumes: %w", limit, err)
	}
	if _, err := k.fsClaim("extra", classWFFC); err != nil {
		return err
	}
	extra, err := k.pod("extra", []corev1.Volume{kubecheck.ClaimVolume("extra", "extra")}, nil, nil)
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
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
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

// maxVolumesEnv names the count --max-volumes-command is to make the driver report.
const maxVolumesEnv = "KUBEVOL_VERIFY_MAX_VOLUMES"

func refreshApplies(e *env) string {
	if p := e.csiDriver.Spec.NodeAllocatableUpdatePeriodSeconds; p == nil || *p <= 0 {
		return "the CSIDriver sets no nodeAllocatableUpdatePeriodSeconds: the node reads the driver's max_volumes_per_node at registration only"
	}
	if e.o.MaxVolumesCommand == "" {
		return "verify was not told how to change the driver's max_volumes_per_node (--max-volumes-command CMD)"
	}
	return ""
}

// allocatableRefresh: the driver's NodeGetInfo changes its max_volumes_per_node (the
// given command), and the node writes the new count to the CSINode's allocatable within
// the CSIDriver's nodeAllocatableUpdatePeriodSeconds (the kubelet's mutable CSINode
// allocatable count, GA in 1.36); the count is set back the same way at the end.
func allocatableRefresh(k *caseEnv) error {
	before, err := k.allocatable()
	if err != nil {
		return err
	}
	period := *k.csiDriver.Spec.NodeAllocatableUpdatePeriodSeconds
	// Another count than the current, and one that limits no other case (they run before).
	next := before + 3
	if err := k.setMaxVolumes(next); err != nil {
		_ = k.setMaxVolumes(before) // whatever the command did, undone as far as it can be
		return err
	}
	restore := func() error {
		if err := k.setMaxVolumes(before); err != nil {
			return err
		}
		return k.waitAllocatable(before, period, "set back to")
	}
	if err := k.waitAllocatable(next, period, "changed to"); err != nil {
		_ = restore()
		return err
	}
	return restore()
}

// allocatable is the driver's allocatable count in the node's CSINode, 0 for none.
func (k *caseEnv) allocatable() (int64, error) {
	cn, err := k.cs.StorageV1().CSINodes().Get(k.ctx, k.node, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for _, d := range cn.Spec.Drivers {
		if d.Name == k.driver && d.Allocatable != nil && d.Allocatable.Count != nil {
			return int64(*d.Allocatable.Count), nil
		}
	}
	return 0, nil
}

// setMaxVolumes runs --max-volumes-command for n and, when the driver's socket is here,
// checks that its NodeGetInfo reports n.
func (k *caseEnv) setMaxVolumes(n int64) error {
	cmd := exec.CommandContext(k.ctx, "/bin/sh", "-c", k.o.MaxVolumesCommand)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", maxVolumesEnv, n))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("--max-volumes-command with %s=%d: %v: %s", maxVolumesEnv, n, err, strings.TrimSpace(string(out)))
	}
	if k.conn == nil {
		return nil
	}
	cctx, cancel := k.conn.WithTimeout(k.ctx)
	info, err := k.conn.Node.NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("NodeGetInfo: %w", err)
	}
	if got := info.GetMaxVolumesPerNode(); got != n {
		return fmt.Errorf("after --max-volumes-command with %s=%d, the driver's NodeGetInfo reports max_volumes_per_node %d", maxVolumesEnv, n, got)
	}
	return nil
}

// waitAllocatable waits up to two update periods (and the API's latency) for the CSINode
// count to be want.
func (k *caseEnv) waitAllocatable(want, period int64, how string) error {
	var got int64
	timeout := 2*time.Duration(period)*time.Second + 10*time.Second
	err := kubecheck.Poll(k.ctx, timeout, func(context.Context) (bool, error) {
		var err error
		got, err = k.allocatable()
		return err == nil && got == want, nil
	})
	if err != nil {
		return fmt.Errorf("the CSINode's allocatable count is %d, %s after the driver's max_volumes_per_node was %s %d (CSIDriver nodeAllocatableUpdatePeriodSeconds %d): the node did not read NodeGetInfo again",
			got, timeout, how, want, period)
	}
	return nil
}
