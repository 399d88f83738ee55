package verify

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// affinityConflict is the scheduler's reason for a node outside a bound PV's node affinity
// (the VolumeBinding plugin's ErrReasonNodeConflict).
const affinityConflict = "didn't match PersistentVolume's node affinity"

// pinnedAway: a volume provisioned in the node's segment cannot follow a pod pinned to a
// node of another segment; the pod stays unschedulable with the scheduler's reason
// (upstream's topology "should fail to schedule a pod which has topologies that conflict
// with AllowedTopologies", here with the conflict coming from the bound PV).
func pinnedAway(k *caseEnv) error {
	if len(k.topology) == 0 {
		return skip("the driver reports no topology keys: its volumes are reachable from every node")
	}
	other, err := k.otherSegmentNode()
	if err != nil {
		return err
	}
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	if _, err := k.runPod("here", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, nil); err != nil {
		return err
	}
	if err := k.boundInSegment("data"); err != nil {
		return err
	}
	if err := k.deletePod("here"); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if pv.Spec.NodeAffinity == nil {
		// A volume without node affinity claims every segment: the pod must mount it there.
		if _, err := k.runPod("away", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, onNode(other)); err != nil {
			return fmt.Errorf("PV %s has no node affinity, but a pod on node %s of another segment: %w", pv.Name, other, err)
		}
		return nil
	}
	away, err := k.pod("away", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: other}
	})
	if err != nil {
		return err
	}
	if err := k.waitUnschedulable(away.Name, affinityConflict); err != nil {
		return fmt.Errorf("a pod pinned to node %s, away from its volume's segment %v: %w", other, k.topology, err)
	}
	if err := k.deletePod("away"); err != nil {
		return err
	}
	return k.deleteClaim("data")
}

// otherSegmentNode is a node other than the run's on which the driver is registered and
// whose segment of the driver's topology keys differs from the run's node's; its absence is
// why a topology case does not apply.
func (k *caseEnv) otherSegmentNode() (string, error) {
	list, err := k.cs.StorageV1().CSINodes().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	registered := 0
	for _, cn := range list.Items {
		if !slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == k.driver }) {
			continue
		}
		registered++
		if cn.Name == k.node {
			continue
		}
		node, err := k.cs.CoreV1().Nodes().Get(k.ctx, cn.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		seg := map[string]string{}
		for key := range k.topology {
			if v, ok := node.Labels[key]; ok {
				seg[key] = v
			}
		}
		if !maps.Equal(seg, k.topology) {
			return cn.Name, nil
		}
	}
	if registered <= 1 {
		return "", skip("the driver is registered on one node only: there is no other segment to pin a pod to (run kubevol up --nodes 2 or more)")
	}
	return "", skip("every node of the driver is in the segment %v: there is no other segment to pin a pod to", k.topology)
}
