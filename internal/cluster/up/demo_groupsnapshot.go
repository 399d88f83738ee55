package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/examples"
	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

// groupDemo is examples/groupsnapshot, decoded.
type groupDemo struct {
	group    *groupv1.VolumeGroupSnapshot
	claims   []*corev1.PersistentVolumeClaim // the group's other claims
	restored *corev1.PersistentVolumeClaim   // from the member of the demo's claim
	pod      *corev1.Pod                     // mounts restored
	writers  []*corev1.Pod                   // mount the other claims, which bind for them
}

func loadGroupDemo() (*groupDemo, error) {
	objs, err := decodeManifests(examples.GroupSnapshot)
	if err != nil {
		return nil, err
	}
	d := &groupDemo{}
	for _, o := range objs {
		switch o := o.(type) {
		case *groupv1.VolumeGroupSnapshot:
			d.group = o
		case *corev1.PersistentVolumeClaim:
			if o.Spec.DataSource != nil {
				d.restored = o
			} else {
				d.claims = append(d.claims, o)
			}
		case *corev1.Pod:
			d.writers = append(d.writers, o)
		default:
			return nil, fmt.Errorf("demo: unsupported object %T in examples/groupsnapshot", o)
		}
	}
	for i, p := range d.writers {
		if d.restored != nil && len(p.Spec.Volumes) > 0 && p.Spec.Volumes[0].PersistentVolumeClaim != nil &&
			p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName == d.restored.Name {
			d.pod = p
			d.writers = slices.Delete(d.writers, i, i+1)
			break
		}
	}
	if d.group == nil || d.restored == nil || d.pod == nil {
		return nil, errors.New("demo: examples/groupsnapshot needs a VolumeGroupSnapshot, a restored claim and a pod")
	}
	return d, nil
}

// demoGroupSnapshot applies examples/groupsnapshot: it takes the demo's claim and a second
// one in one VolumeGroupSnapshot, waits until it is ready, lists the member snapshots, then
// restores the demo claim's member into a new claim that a pod mounts, and shows the file
// written before the group was taken.
func (s *Stack) demoGroupSnapshot(ctx context.Context, cs kubernetes.Interface, snap snapclient.Interface, out io.Writer) error {
	d, err := loadGroupDemo()
	if err != nil {
		return err
	}
	for _, c := range d.claims {
		if err := createIfMissing(ctx, cs, c); err != nil {
			return err
		}
	}
	for _, p := range d.writers {
		w, dir, err := s.remount(ctx, cs, p)
		if err != nil {
			return err
		}
		file := filepath.Join(dir, "notes.txt")
		if err := os.WriteFile(file, []byte("written through pod "+string(w.UID)+"\n"), 0o644); err != nil {
			return fmt.Errorf("demo: write through the mount of pod %s: %w", w.Name, err)
		}
		fmt.Fprintf(out, "\nwrote %s through pod %s\n", file, w.Name)
	}
	g := d.group
	fmt.Fprintf(out, "\ntaking VolumeGroupSnapshot %s/%s of the claims labelled %s…\n", g.Namespace, g.Name, metav1.FormatLabelSelector(g.Spec.Source.Selector))
	groups := snap.GroupsnapshotV1().VolumeGroupSnapshots(g.Namespace)
	if _, err := groups.Create(ctx, g, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, demoTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := groups.Get(ctx, g.Name, metav1.GetOptions{})
		if err != nil || cur.Status == nil {
			return false, nil
		}
		g = cur
		return ptr.Deref(cur.Status.ReadyToUse, false), nil
	})
	if err != nil {
		msg := ""
		if g.Status != nil && g.Status.Error != nil {
			msg = ptr.Deref(g.Status.Error.Message, "")
		}
		return fmt.Errorf("demo: VolumeGroupSnapshot %s not ready: %w (error: %q)", g.Name, err, msg)
	}
	members, err := groupMembers(ctx, snap, g)
	if err != nil {
		return err
	}
	claims := make([]string, 0, len(members))
	for c := range members {
		claims = append(claims, c+" → "+members[c])
	}
	slices.Sort(claims)
	fmt.Fprintf(out, "ready to use after %s: content %s, member snapshots %s\n", time.Since(start).Round(time.Millisecond),
		ptr.Deref(g.Status.BoundVolumeGroupSnapshotContentName, ""), strings.Join(claims, ", "))

	into := d.pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	member := members[demoClaim]
	if member == "" {
		return fmt.Errorf("demo: the group has no member snapshot of claim %s", demoClaim)
	}
	d.restored.Spec.DataSource.Name = member
	if err := createIfMissing(ctx, cs, d.restored); err != nil {
		return err
	}
	fmt.Fprintf(out, "restoring the member of claim %s into claim %s, mounted by pod %s…\n", demoClaim, into, d.pod.Name)
	return s.showRestored(ctx, cs, d.pod, "the claim restored from the group", out)
}

// demoClaim is the claim of the demo pod, which the first part writes to.
const demoClaim = "data"

// groupMembers maps claim name to the member VolumeSnapshot that group owns, once there is
// one for every claim the group's content lists.
func groupMembers(ctx context.Context, snap snapclient.Interface, g *groupv1.VolumeGroupSnapshot) (map[string]string, error) {
	members := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, demoTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := snap.SnapshotV1().VolumeSnapshots(g.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, vs := range list.Items {
			if snapshotter.MemberOf(vs.OwnerReferences, g.UID) && vs.Spec.Source.PersistentVolumeClaimName != nil {
				members[*vs.Spec.Source.PersistentVolumeClaimName] = vs.Name
			}
		}
		return members[demoClaim] != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("demo: the member snapshots of group %s did not appear: %w (found %v)", g.Name, err, members)
	}
	return members, nil
}
