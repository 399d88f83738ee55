package groupcontroller

import (
	"context"
	"fmt"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// deleteGroup handles a VolumeGroupSnapshot with a deletionTimestamp, as upstream: wait
// while a claim restores from a member, mark the content being-deleted, delete a
// Delete-policy content, delete the members, and release the group once its content (and
// with it the backend group snapshot) is gone.
func (c *Controller) deleteGroup(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) error {
	if !snapshotter.HasFinalizer(vgs, snapshotter.FinalizerGroupBound) {
		return nil
	}
	content, err := c.boundContent(ctx, vgs)
	if err != nil {
		return err
	}
	members, err := c.members(vgs)
	if err != nil {
		return err
	}
	for _, vs := range members {
		if claim, err := snapshotter.RestoringClaim(c.claims, vs); err != nil {
			return err
		} else if claim != "" {
			c.recorder.Eventf(vgs, corev1.EventTypeWarning, reasonDeletePending, "Snapshot %s/%s belonging to VolumeGroupSnapshot %s/%s is being used to restore claim %s", vs.Namespace, vs.Name, vgs.Namespace, vgs.Name, claim)
			return fmt.Errorf("%w: claim %s restores from member %s", errRetry, claim, vs.Name)
		}
	}
	deleteContent := content != nil && content.Spec.DeletionPolicy == snapv1.VolumeSnapshotContentDelete
	if content != nil {
		if content.Annotations[snapshotter.AnnGroupBeingDeleted] != "yes" {
			if content, err = contentwrite.Annotate(ctx, c.contentWriter(), content, snapshotter.AnnGroupBeingDeleted, true); err != nil {
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}
		}
		if deleteContent && content.DeletionTimestamp == nil {
			if err := contentwrite.Delete(ctx, c.contentWriter(), c.contentClient(), content); err != nil {
				c.recorder.Eventf(vgs, corev1.EventTypeWarning, reasonContentDelete, "Failed to delete group snapshot content %s: %v", content.Name, err)
				return err
			}
			klog.FromContext(ctx).V(2).Info("Deleted group content", "content", content.Name)
		}
	}
	for _, vs := range members {
		if vs.DeletionTimestamp != nil {
			continue
		}
		err := c.cfg.Snap.SnapshotV1().VolumeSnapshots(vs.Namespace).Delete(ctx, vs.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &vs.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			c.recorder.Eventf(vgs, corev1.EventTypeWarning, reasonMemberDelete, "failed to delete snapshot API object %s/%s part of group snapshot %s/%s: %v", vs.Namespace, vs.Name, vgs.Namespace, vgs.Name, err)
			return err
		}
	}
	if err := c.deleteOrphanMemberContents(ctx, vgs, content); err != nil {
		return err
	}
	// The bound finalizer stays while a Delete-policy content exists: the group goes when the
	// backend group snapshot is gone. The content's deletion wakes this group up.
	if deleteContent {
		return nil
	}
	if _, err := snapshotter.VolumeGroupSnapshots(c.cfg.Snap, write.Update).SetFinalizer(ctx, vgs, snapshotter.FinalizerGroupBound, false); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return write.WarnUnlessConflict(c.recorder, vgs, reasonFinalizer, err, "Failed to remove finalizers: %v")
	}
	st := vgs.Status
	c.cfg.Metrics.Deleted(c.subject(vgs, content), vgs.CreationTimestamp.Time, vgs.DeletionTimestamp.Time,
		st != nil && st.CreationTime != nil, st != nil && ptr.Deref(st.ReadyToUse, false))
	klog.FromContext(ctx).V(2).Info("Released group snapshot")
	return nil
}

// deleteOrphanMemberContents deletes the member contents whose VolumeSnapshot was never
// created (a kill between the two creates): nothing else would ever release them.
func (c *Controller) deleteOrphanMemberContents(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) error {
	if content == nil || content.Status == nil {
		return nil
	}
	for _, info := range content.Status.VolumeSnapshotInfoList {
		vsName := snapshotter.MemberSnapshotName(string(vgs.UID), info.VolumeHandle)
		if _, err := c.snapshots.VolumeSnapshots(vgs.Namespace).Get(vsName); err == nil || !apierrors.IsNotFound(err) {
			continue
		}
		vsc, err := c.snapConts.Get(snapshotter.MemberContentName(string(vgs.UID), info.VolumeHandle))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if vsc.Spec.VolumeSnapshotRef.UID != "" || vsc.DeletionTimestamp != nil {
			continue // bound to a snapshot that existed: that snapshot's deletion releases it
		}
		vsc = vsc.DeepCopy()
		vsc.Annotations[snapshotter.AnnBeingDeleted] = "yes"
		if _, err := snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Update).Write(ctx, vsc, vsc); err != nil {
			return err
		}
		if err := c.cfg.Snap.SnapshotV1().VolumeSnapshotContents().Delete(ctx, vsc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// boundContent returns the group's content if it exists and points back to the group.
func (c *Controller) boundContent(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) (*groupv1.VolumeGroupSnapshotContent, error) {
	name := ""
	if vgs.Status != nil {
		name = ptr.Deref(vgs.Status.BoundVolumeGroupSnapshotContentName, "")
	}
	if name == "" && vgs.Spec.Source.Selector != nil {
		name = snapshotter.GroupContentName(vgs)
	}
	if name == "" && vgs.Spec.Source.VolumeGroupSnapshotContentName != nil {
		name = *vgs.Spec.Source.VolumeGroupSnapshotContentName
	}
	content, err := c.content(ctx, name)
	if err != nil || content == nil {
		return nil, err
	}
	ref := content.Spec.VolumeGroupSnapshotRef
	if ref.Name != vgs.Name || ref.Namespace != vgs.Namespace || ref.UID != vgs.UID {
		return nil, nil
	}
	return content, nil
}
