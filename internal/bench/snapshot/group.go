package snapshot

import (
	"context"
	"fmt"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/bench/report"
)

// sourceLabel selects the benchmark's source claims for the group snapshots.
const sourceLabel = "bench.kubevol.io/source"

// kind is what the benchmark creates: VolumeSnapshots of one claim, or VolumeGroupSnapshots
// of all source claims (each group ready once all its members are).
type kind struct {
	object, series, file string
	create               func(ctx context.Context, snap snapclient.Interface, ns string, n int, created func(string, time.Time)) error
	deleteAll            func(ctx context.Context, snap snapclient.Interface, ns string) error
	count                func(ctx context.Context, snap snapclient.Interface, ns string) (int, error)
}

func kindOf(group bool) kind {
	if group {
		return kind{object: "VolumeGroupSnapshot", series: "volumegroupsnapshot_to_ready", file: "groupsnapshot", create: createGroups,
			deleteAll: func(ctx context.Context, snap snapclient.Interface, ns string) error {
				return snap.GroupsnapshotV1().VolumeGroupSnapshots(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			},
			count: func(ctx context.Context, snap snapclient.Interface, ns string) (int, error) {
				l, err := snap.GroupsnapshotV1().VolumeGroupSnapshots(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return 0, err
				}
				// Members go with their group; wait for them too, so the figure includes their cleanup.
				m, err := snap.SnapshotV1().VolumeSnapshots(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return 0, err
				}
				return len(l.Items) + len(m.Items), nil
			}}
	}
	return kind{object: "VolumeSnapshot", series: "volumesnapshot_to_ready", file: "snapshot", create: createSnapshots,
		deleteAll: func(ctx context.Context, snap snapclient.Interface, ns string) error {
			return snap.SnapshotV1().VolumeSnapshots(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		},
		count: func(ctx context.Context, snap snapclient.Interface, ns string) (int, error) {
			l, err := snap.SnapshotV1().VolumeSnapshots(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, err
			}
			return len(l.Items), nil
		}}
}

// readyOf is the name of a VolumeSnapshot or VolumeGroupSnapshot and whether it is readyToUse.
func readyOf(obj any) (string, bool) {
	switch o := obj.(type) {
	case *snapv1.VolumeSnapshot:
		return o.Name, o.Status != nil && o.Status.ReadyToUse != nil && *o.Status.ReadyToUse
	case *groupv1.VolumeGroupSnapshot:
		return o.Name, o.Status != nil && o.Status.ReadyToUse != nil && *o.Status.ReadyToUse
	}
	return "", false
}

// createSources creates n labelled claims of class sc: the single snapshot's source is the
// first, named "source".
func createSources(ctx context.Context, cs kubernetes.Interface, ns, sc string, n int) error {
	for i := range n {
		name := "source"
		if i > 0 {
			name = fmt.Sprintf("source-%d", i)
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{sourceLabel: "true"}},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &sc, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}}}}
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// createGroups creates n VolumeGroupSnapshots of the labelled source claims, with the
// cluster's default group class.
func createGroups(ctx context.Context, snap snapclient.Interface, ns string, n int, created func(string, time.Time)) error {
	return report.Parallel(n, 32, func(i int) error {
		name := fmt.Sprintf("group-%05d", i)
		at := time.Now()
		g := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{sourceLabel: "true"}}}}}
		if _, err := snap.GroupsnapshotV1().VolumeGroupSnapshots(ns).Create(ctx, g, metav1.CreateOptions{}); err != nil {
			return err
		}
		created(name, at)
		return nil
	})
}
