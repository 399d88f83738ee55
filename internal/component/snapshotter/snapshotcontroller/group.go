package snapshotcontroller

import (
	"context"
	"fmt"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
)

// memberDeletable refuses the deletion of a member of a group snapshot while its group
// exists, as upstream: the members go with the group. kubevol lets it through once the group
// is being deleted, which is what deletes the members, so they need not wait for the group's
// own finalizer. A group that is gone releases the member (and its in-group finalizer).
func (c *Controller) memberDeletable(ctx context.Context, vs *snapv1.VolumeSnapshot) error {
	group := ""
	if vs.Status != nil {
		group = ptr.Deref(vs.Status.VolumeGroupSnapshotName, "")
	}
	if group == "" {
		group = snapshotter.GroupOwner(vs)
	}
	if group == "" {
		return nil
	}
	vgs, err := c.cfg.Snap.GroupsnapshotV1().VolumeGroupSnapshots(vs.Namespace).Get(ctx, group, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if vgs.DeletionTimestamp != nil {
		return nil
	}
	// A group of the same name made after the member's own group went does not hold it.
	if o := snapshotter.GroupOwnerRef(vs); o != nil && o.UID != "" && o.UID != vgs.UID {
		return nil
	}
	msg := fmt.Sprintf("deletion of the individual volume snapshot %s/%s is not allowed as it belongs to group snapshot %s/%s. Deleting the group snapshot will trigger the deletion of all the individual volume snapshots that are part of the group.",
		vs.Namespace, vs.Name, vs.Namespace, group)
	c.recorder.Event(vs, corev1.EventTypeWarning, reasonDeletePending, msg)
	return fmt.Errorf("%w: %s", errRetry, msg)
}
