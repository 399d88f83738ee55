package snapshotcontroller

import (
	"context"
	"fmt"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// deleteSnapshot handles a VolumeSnapshot with a deletionTimestamp, as upstream: wait while
// a claim restores from it, mark its content being-deleted, delete a Delete-policy content,
// and release the snapshot once its content (and with it the backend snapshot) is gone.
func (c *Controller) deleteSnapshot(ctx context.Context, vs *snapv1.VolumeSnapshot) error {
	if !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotAsSource) && !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotBound) &&
		!snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotInGroup) {
		return nil
	}
	if err := c.memberDeletable(ctx, vs); err != nil {
		return err
	}
	content, err := c.boundContent(ctx, vs)
	if err != nil {
		return err
	}
	if restoring, err := snapshotter.RestoringClaim(c.claims, vs); err != nil {
		return err
	} else if restoring != "" {
		c.recorder.Eventf(vs, corev1.EventTypeWarning, reasonDeletePending, "Snapshot is being used to restore claim %s; it will be deleted once the claim is provisioned", restoring)
		return fmt.Errorf("%w: claim %s restores from the snapshot", errRetry, restoring)
	}
	contentGone := content == nil
	if content != nil {
		if content.Annotations[snapshotter.AnnBeingDeleted] != "yes" {
			if content, err = contentwrite.Annotate(ctx, c.contentWriter(), content, snapshotter.AnnBeingDeleted, true); err != nil {
				if apierrors.IsNotFound(err) {
					return nil // gone meanwhile: the next sync sees it
				}
				return err
			}
		}
		if content.Spec.DeletionPolicy == snapv1.VolumeSnapshotContentDelete && content.DeletionTimestamp == nil {
			if err := contentwrite.Delete(ctx, c.contentWriter(), c.cfg.Snap.SnapshotV1().VolumeSnapshotContents(), content); err != nil {
				c.recorder.Eventf(vs, corev1.EventTypeWarning, reasonContentDelete, "Failed to delete VolumeSnapshotContent %s: %v", content.Name, err)
				return err
			}
			klog.FromContext(ctx).V(2).Info("Deleted content", "content", content.Name)
		}
	}
	if src := vs.Spec.Source.PersistentVolumeClaimName; src != nil {
		if err := c.releaseClaim(ctx, vs.Namespace, *src); err != nil {
			return err
		}
	}
	// The bound finalizer stays while a Delete-policy content exists: the snapshot goes when
	// the backend snapshot is gone. The content's deletion wakes this snapshot up.
	keepBound := !contentGone && content.Spec.DeletionPolicy == snapv1.VolumeSnapshotContentDelete
	release := []string{snapshotter.FinalizerSnapshotAsSource, snapshotter.FinalizerSnapshotInGroup}
	if !keepBound {
		release = append(release, snapshotter.FinalizerSnapshotBound)
	}
	if !write.SetFinalizers(vs.DeepCopy(), false, release...) {
		return nil
	}
	// The role's own events are recorded here, so the writer logs refusals only.
	snapshots := snapshotter.VolumeSnapshots(c.cfg.Snap, write.Update)
	if _, err := snapshots.Mutate(ctx, vs, func(cur *snapv1.VolumeSnapshot) bool { return write.SetFinalizers(cur, false, release...) }); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return write.WarnUnlessConflict(c.recorder, vs, reasonFinalizer, err, "Failed to remove finalizers: %v")
	}
	if !keepBound { // the controller's last finalizer is gone
		st := vs.Status
		c.cfg.Metrics.Deleted(c.deletedSubject(vs, content), vs.CreationTimestamp.Time, vs.DeletionTimestamp.Time,
			st != nil && st.CreationTime != nil, st != nil && ptr.Deref(st.ReadyToUse, false))
	}
	klog.FromContext(ctx).V(2).Info("Released snapshot", "keptBoundFinalizer", keepBound)
	return nil
}

// boundContent returns the content of vs if it exists and points back to vs (name,
// namespace, UID), else nil: the status name, or snapcontent-<uid> for a dynamic snapshot
// whose status was never written.
func (c *Controller) boundContent(ctx context.Context, vs *snapv1.VolumeSnapshot) (*snapv1.VolumeSnapshotContent, error) {
	name := ""
	if vs.Status != nil {
		name = ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "")
	}
	if name == "" && vs.Spec.Source.PersistentVolumeClaimName != nil {
		name = snapshotter.ContentName(vs)
	}
	if name == "" {
		return nil, nil
	}
	content, err := c.content(ctx, name)
	if err != nil || content == nil {
		return nil, err
	}
	ref := content.Spec.VolumeSnapshotRef
	if ref.Name != vs.Name || ref.Namespace != vs.Namespace || ref.UID != vs.UID {
		return nil, nil
	}
	return content, nil
}

// sizeQuantity is a content's restoreSize in bytes as the snapshot's Quantity.
func sizeQuantity(b int64) *resource.Quantity { return resource.NewQuantity(b, resource.BinarySI) }

func statusEqual(a, b *snapv1.VolumeSnapshotStatus) bool { return equality.Semantic.DeepEqual(a, b) }
