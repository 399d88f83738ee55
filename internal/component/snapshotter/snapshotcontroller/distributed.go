package snapshotcontroller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// managedBy is the node whose csi-snapshotter takes the snapshot of pv with Distributed
// (upstream --enable-distributed-snapshotting): a node that the PV's required node affinity
// selects (upstream takes the first its lister gives; here the first by name, so that
// replicas agree). A PV without node affinity, or whose affinity
// selects no node, gets no label, as upstream's; its content is then seen by no per-node
// sidecar, which the log line says.
func (c *Controller) managedBy(ctx context.Context, pv *corev1.PersistentVolume) (string, error) {
	if !c.cfg.Distributed {
		return "", nil
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		klog.FromContext(ctx).V(4).Info("Volume has no node affinity: its content gets no managed-by label", "pv", pv.Name)
		return "", nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return "", fmt.Errorf("list nodes for the managed-by label of volume %s: %w", pv.Name, err)
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		if ok, _ := schedulinghelpers.MatchNodeSelectorTerms(n, pv.Spec.NodeAffinity.Required); ok {
			return n.Name, nil
		}
	}
	klog.FromContext(ctx).Info("No node matches the volume's node affinity: its content gets no managed-by label, and no per-node csi-snapshotter sees it", "pv", pv.Name)
	return "", nil
}
