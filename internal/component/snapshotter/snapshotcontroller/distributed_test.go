package snapshotcontroller

import (
	"context"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

// With --enable-distributed-snapshotting a dynamic content is labelled with the node its
// source volume's node affinity selects (the first by name of several); without the flag,
// or for a volume without node affinity or whose affinity selects no node, it has no label.
func TestDistributedSnapshottingLabelsTheSourceNode(t *testing.T) {
	const zone = "topology.example.com/zone"
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n3", Labels: map[string]string{zone: "b"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{zone: "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{zone: "b"}}},
	}
	affinity := func(values ...string) *corev1.VolumeNodeAffinity {
		return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: values}}}}}}
	}
	for _, tc := range []struct {
		name        string
		distributed bool
		affinity    *corev1.VolumeNodeAffinity
		want        string
	}{
		{"distributed, zone b", true, affinity("b"), "n2"},
		{"distributed, zone a", true, affinity("a"), "n1"},
		{"distributed, no node in zone c", true, affinity("c"), ""},
		{"distributed, no node affinity", true, nil, ""},
		{"not distributed", false, affinity("a"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc, pv := snaptest.BoundClaim(ns, "src", driver, nil)
			pv.Spec.NodeAffinity = tc.affinity
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			f := &fixture{t: t, ctx: ctx}
			f.core, f.snap = snaptest.Clients([]runtime.Object{pvc, pv}, class("gold", snapv1.VolumeSnapshotContentDelete, true), dynamic("s"))
			c, err := New(ctx, Config{RoleConfig: RoleConfig{Client: f.core, Snap: f.snap, Distributed: tc.distributed}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.stopEvents)
			f.c = c
			if (c.nodes != nil) != tc.distributed {
				t.Errorf("node lister %v with distributed %v: upstream watches Nodes only when distributed", c.nodes != nil, tc.distributed)
			}
			c.nodes = corelisters.NewNodeLister(snaptest.Indexer(t, nodes))
			f.syncUntil("s", "created the content", func() bool { return f.vsc("snapcontent-uid-s") != nil })
			if got := f.vsc("snapcontent-uid-s").Labels[snapshotter.LabelManagedBy]; got != tc.want {
				t.Errorf("label %s = %q, want %q", snapshotter.LabelManagedBy, got, tc.want)
			}
		})
	}
}
