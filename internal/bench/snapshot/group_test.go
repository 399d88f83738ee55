package snapshot

import (
	"context"
	"sync"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestGroupKind is a smoke test of the --group pieces over fake clientsets: labelled source
// claims, N VolumeGroupSnapshots selecting them, readiness, the files' name and cleanup count.
func TestGroupKind(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	if err := createSources(ctx, cs, "ns", "sc", 3); err != nil {
		t.Fatal(err)
	}
	claims, _ := cs.CoreV1().PersistentVolumeClaims("ns").List(ctx, metav1.ListOptions{LabelSelector: sourceLabel + "=true"})
	if len(claims.Items) != 3 || claims.Items[0].Name != "source" {
		t.Fatalf("source claims = %d (first %q), want 3 labelled, the first named source", len(claims.Items), claims.Items[0].Name)
	}
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	snap := snapfake.NewSimpleClientset()
	k := kindOf(true)
	if k.file != "groupsnapshot" || k.series != "volumegroupsnapshot_to_ready" {
		t.Errorf("group kind writes %s with series %s", k.file, k.series)
	}
	var mu sync.Mutex
	var names []string
	if err := k.create(ctx, snap, "ns", 5, func(n string, _ time.Time) { mu.Lock(); names = append(names, n); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	l, _ := snap.GroupsnapshotV1().VolumeGroupSnapshots("ns").List(ctx, metav1.ListOptions{})
	if len(l.Items) != 5 || len(names) != 5 {
		t.Fatalf("created %d groups, reported %d, want 5", len(l.Items), len(names))
	}
	if sel := l.Items[0].Spec.Source.Selector; sel == nil || sel.MatchLabels[sourceLabel] != "true" {
		t.Errorf("group selector = %v, want the source label", sel)
	}
	if n, err := k.count(ctx, snap, "ns"); err != nil || n != 5 {
		t.Errorf("count = %d, %v", n, err)
	}
	g := l.Items[0]
	if _, ok := readyOf(&g); ok {
		t.Errorf("group without status counted ready")
	}
	g.Status = &groupv1.VolumeGroupSnapshotStatus{ReadyToUse: new(bool)}
	*g.Status.ReadyToUse = true
	if name, ok := readyOf(&g); !ok || name != g.Name {
		t.Errorf("ready group not counted")
	}
	if err := k.deleteAll(ctx, snap, "ns"); err != nil {
		t.Fatal(err)
	}
	// The fake does not apply delete-collection; check that it was asked of the groups.
	acts := snap.Actions()
	if a := acts[len(acts)-1]; a.GetVerb() != "delete-collection" || a.GetResource().Resource != "volumegroupsnapshots" || a.GetNamespace() != "ns" {
		t.Errorf("cleanup action = %s %s in %q, want delete-collection of volumegroupsnapshots in ns", a.GetVerb(), a.GetResource().Resource, a.GetNamespace())
	}
}
