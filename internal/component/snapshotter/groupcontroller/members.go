package groupcontroller

import (
	"context"
	"encoding/json"
	"fmt"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

func errorStatus(t metav1.Time, msg string) *snapv1.VolumeSnapshotError {
	return &snapv1.VolumeSnapshotError{Time: &t, Message: &msg}
}

// createMembers makes one VolumeSnapshotContent and one VolumeSnapshot per member of a
// group snapshot the sidecar has taken, as upstream: names hashed from the group's UID and
// the volume handle, the content marked with the group snapshot handle (the csi-snapshotter
// makes no CreateSnapshot for it) and its status filled from the group content's, the
// snapshot owned by the group, in-group protected, bound to the content. Every step is
// idempotent, so a kill at any point is repaired by the next sync.
func (c *Controller) createMembers(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) error {
	st := content.Status
	if st == nil || ptr.Deref(st.VolumeGroupSnapshotHandle, "") == "" || len(st.VolumeSnapshotInfoList) == 0 {
		return nil // not taken yet; the content's status update wakes the group
	}
	var secret *corev1.SecretReference
	if n := content.Spec.VolumeGroupSnapshotClassName; n != nil {
		if class, err := c.class(ctx, *n); err == nil {
			if secret, err = snapshotter.GroupSecret(class, content.Name, nil); err != nil {
				return err
			}
		}
	}
	for _, info := range st.VolumeSnapshotInfoList {
		if err := c.createMember(ctx, vgs, content, info, secret); err != nil {
			return fmt.Errorf("member of volume %s: %w", info.VolumeHandle, err)
		}
	}
	return nil
}

func (c *Controller) createMember(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, group *groupv1.VolumeGroupSnapshotContent, info groupv1.VolumeSnapshotInfo, secret *corev1.SecretReference) error {
	vsName := snapshotter.MemberSnapshotName(string(vgs.UID), info.VolumeHandle)
	vscName := snapshotter.MemberContentName(string(vgs.UID), info.VolumeHandle)
	pv := c.volumeByHandle(group.Spec.Driver, info.VolumeHandle)
	handle := info.VolumeHandle
	vsc := &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{
			Name:        vscName,
			Annotations: map[string]string{snapshotter.AnnGroupSnapshotHandle: *group.Status.VolumeGroupSnapshotHandle},
			// Born bound-protected, so the content cannot go before the snapshot-controller
			// has released it.
			Finalizers: []string{snapshotter.FinalizerContentBound},
		},
		Spec: snapv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Kind: "VolumeSnapshot", APIVersion: snapv1.SchemeGroupVersion.String(), Name: vsName, Namespace: vgs.Namespace},
			DeletionPolicy:    group.Spec.DeletionPolicy,
			Driver:            group.Spec.Driver,
			Source:            snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle},
		},
	}
	if pv != nil && c.cfg.PreventVolumeModeConversion {
		mode := corev1.PersistentVolumeFilesystem
		if pv.Spec.VolumeMode != nil {
			mode = *pv.Spec.VolumeMode
		}
		vsc.Spec.SourceVolumeMode = &mode
	}
	if secret != nil {
		vsc.Annotations[snapshotter.AnnDeletionSecretName], vsc.Annotations[snapshotter.AnnDeletionSecretNamespace] = secret.Name, secret.Namespace
	}
	snaps := c.cfg.Snap.SnapshotV1()
	gotVSC, err := snaps.VolumeSnapshotContents().Create(ctx, vsc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		gotVSC, err = c.snapConts.Get(vscName)
		if apierrors.IsNotFound(err) {
			gotVSC, err = snaps.VolumeSnapshotContents().Get(ctx, vscName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return err
	}
	claim := ""
	if pv != nil && pv.Spec.ClaimRef != nil {
		claim = pv.Spec.ClaimRef.Name
	}
	isController := true
	vs := &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Name: vsName, Namespace: vgs.Namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: vgs.Name, UID: vgs.UID, Controller: &isController}},
			Finalizers:      []string{snapshotter.FinalizerSnapshotInGroup},
		},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}},
	}
	gotVS, err := snaps.VolumeSnapshots(vgs.Namespace).Create(ctx, vs, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		gotVS, err = c.snapshots.VolumeSnapshots(vgs.Namespace).Get(vsName)
		if apierrors.IsNotFound(err) || (err == nil && gotVSC.Spec.VolumeSnapshotRef.UID != "" && gotVSC.Spec.VolumeSnapshotRef.UID != gotVS.UID) {
			// Not cached yet, or the cache may still hold a member deleted since: the API
			// server tells which snapshot the content is to be bound to.
			gotVS, err = snaps.VolumeSnapshots(vgs.Namespace).Get(ctx, vsName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return err
	}
	if snapshotter.GroupOwner(gotVS) != vgs.Name {
		return fmt.Errorf("VolumeSnapshot %s/%s exists and is not a member of this group", vgs.Namespace, vsName)
	}
	// A member snapshot made again (the one before is gone) gets the content, as upstream
	// binds it to the snapshot it has just created.
	if gotVSC.Spec.VolumeSnapshotRef.UID != gotVS.UID {
		gotVSC = gotVSC.DeepCopy()
		gotVSC.Spec.VolumeSnapshotRef.UID = gotVS.UID
		if gotVSC, err = snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Update).Write(ctx, gotVSC, gotVSC); err != nil {
			return err
		}
	}
	if gotVS.Status == nil || ptr.Deref(gotVS.Status.BoundVolumeSnapshotContentName, "") == "" {
		gotVS = gotVS.DeepCopy()
		ready := false
		gotVS.Status = &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &vscName, ReadyToUse: &ready, VolumeGroupSnapshotName: &vgs.Name}
		if _, err := snapshotter.VolumeSnapshots(c.cfg.Snap, write.Update).WriteStatus(ctx, gotVS, gotVS); err != nil {
			return err
		}
	}
	if gotVSC.Status == nil || ptr.Deref(gotVSC.Status.SnapshotHandle, "") == "" {
		status := map[string]any{
			"snapshotHandle":            info.SnapshotHandle,
			"volumeGroupSnapshotHandle": *group.Status.VolumeGroupSnapshotHandle,
			"readyToUse":                ptr.Deref(info.ReadyToUse, false),
		}
		if info.CreationTime != nil {
			status["creationTime"] = *info.CreationTime
		}
		if info.RestoreSize != nil {
			status["restoreSize"] = *info.RestoreSize
		}
		data, err := json.Marshal(map[string]any{"status": status})
		if err != nil {
			return err
		}
		if _, err := snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Patch).SendStatusPatch(ctx, gotVSC, types.MergePatchType, data); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Created group member", "volumesnapshot", klog.KRef(vgs.Namespace, vsName), "content", vscName, "snapshotHandle", info.SnapshotHandle)
	} else if ptr.Deref(info.ReadyToUse, false) && !ptr.Deref(gotVSC.Status.ReadyToUse, false) {
		// The driver finished processing the group after the members were made.
		if _, err := snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Patch).SendStatusPatch(ctx, gotVSC, types.MergePatchType, []byte(`{"status":{"readyToUse":true}}`)); err != nil {
			return err
		}
	}
	return nil
}

// volumeByHandle finds the PV of driver with volumeHandle, or nil.
func (c *Controller) volumeByHandle(driver, handle string) *corev1.PersistentVolume {
	all, err := c.volumes.List(labels.Everything())
	if err != nil {
		return nil
	}
	for _, pv := range all {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == driver && pv.Spec.CSI.VolumeHandle == handle {
			return pv
		}
	}
	return nil
}

// members lists the VolumeSnapshots owned by the group (by UID).
func (c *Controller) members(vgs *groupv1.VolumeGroupSnapshot) ([]*snapv1.VolumeSnapshot, error) {
	all, err := c.snapshots.VolumeSnapshots(vgs.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*snapv1.VolumeSnapshot
	for _, vs := range all {
		if snapshotter.MemberOf(vs.OwnerReferences, vgs.UID) {
			out = append(out, vs)
		}
	}
	return out, nil
}
