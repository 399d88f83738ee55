package claim

import (
	"context"
	"fmt"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/sizes"
)

const (
	kindPVC      = "PersistentVolumeClaim"
	kindSnapshot = "VolumeSnapshot"
	snapshotAPI  = "snapshot.storage.k8s.io"
	// AnnAllowVolumeModeChange on a VolumeSnapshotContent allows restoring into another mode.
	AnnAllowVolumeModeChange = "snapshot.storage.k8s.io/allow-volume-mode-change"
)

// claimDataSource is spec.dataSource, else spec.dataSourceRef, as upstream normalizes it.
func claimDataSource(claim *corev1.PersistentVolumeClaim) *corev1.TypedObjectReference {
	if ds := claim.Spec.DataSource; ds != nil {
		return &corev1.TypedObjectReference{APIGroup: ds.APIGroup, Kind: ds.Kind, Name: ds.Name}
	}
	return claim.Spec.DataSourceRef
}

func dataSourceKind(claim *corev1.PersistentVolumeClaim) string {
	if ds := claimDataSource(claim); ds != nil {
		return ds.Kind
	}
	return ""
}

func (c *Controller) claimsLister() corelisters.PersistentVolumeClaimLister {
	return corelisters.NewPersistentVolumeClaimLister(c.claims)
}

func (c *Controller) contentSource(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, requested int64) (*csi.VolumeContentSource, error) {
	ds := claimDataSource(claim)
	if ds == nil {
		return nil, nil
	}
	group := ""
	if ds.APIGroup != nil {
		group = *ds.APIGroup
	}
	if ds.Namespace != nil && *ds.Namespace != claim.Namespace {
		return nil, fmt.Errorf("data source %s %s is in namespace %s: cross-namespace data sources are not supported", ds.Kind, ds.Name, *ds.Namespace)
	}
	if ds.Name == "" {
		return nil, fmt.Errorf("data source %s has no name", ds.Kind)
	}
	switch {
	case group == "" && ds.Kind == kindPVC:
		return c.cloneSource(ctx, claim, class, ds.Name, requested)
	case group == snapshotAPI && ds.Kind == kindSnapshot:
		return c.snapshotSource(ctx, claim, class, ds.Name, requested)
	}
	c.cfg.Recorder.Event(claim, corev1.EventTypeNormal, ReasonProvisioning, "Assuming an external populator will provision the volume")
	return nil, &stopError{msg: "external populator"}
}

func (c *Controller) cloneSource(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, name string, requested int64) (*csi.VolumeContentSource, error) {
	if !c.cfg.Caps.Controller[csi.ControllerServiceCapability_RPC_CLONE_VOLUME] {
		return nil, fmt.Errorf("CSI driver %s does not support cloning (no CLONE_VOLUME capability)", c.cfg.DriverName)
	}
	src, err := c.claimsLister().PersistentVolumeClaims(claim.Namespace).Get(name)
	if err != nil {
		return nil, fmt.Errorf("clone source claim %s/%s: %w", claim.Namespace, name, err)
	}
	switch {
	case src.DeletionTimestamp != nil:
		return nil, fmt.Errorf("clone source claim %s is being deleted", name)
	case src.Status.Phase != corev1.ClaimBound:
		return nil, fmt.Errorf("clone source claim %s is not Bound yet", name)
	case pvspec.ClaimClass(src) == "" || pvspec.ClaimClass(claim) == "":
		return nil, fmt.Errorf("clone source claim %s and the clone must both have a StorageClass", name)
	}
	if srcSize, ok := src.Spec.Resources.Requests[corev1.ResourceStorage]; ok && smallerThan(requested, srcSize) {
		return nil, fmt.Errorf("the clone requests %s but its source %s is %s: request at least the source's size",
			resource.NewQuantity(requested, resource.BinarySI), name, srcSize.String())
	}
	pv, err := c.volumes.Get(src.Spec.VolumeName)
	if err != nil {
		return nil, fmt.Errorf("volume %s of clone source %s: %w", src.Spec.VolumeName, name, err)
	}
	switch {
	case pv.Spec.CSI == nil || pv.Spec.CSI.Driver != class.Provisioner:
		return nil, fmt.Errorf("clone source %s is not a volume of driver %s", name, class.Provisioner)
	case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != src.UID:
		return nil, fmt.Errorf("volume %s is not bound to the clone source %s", pv.Name, name)
	case pvspec.IsBlock(src) != pvspec.IsBlock(claim):
		return nil, fmt.Errorf("the clone and its source %s must have the same volumeMode", name)
	}
	if !pvspec.HasFinalizer(src, pvspec.CloneFinalizer) {
		// external-provisioner's role grants update on claims, not patch.
		if _, err := write.ClaimFinalizers(c.cfg.Client).SetFinalizer(ctx, src, pvspec.CloneFinalizer, true); err != nil {
			return nil, fmt.Errorf("protect clone source %s: %w", name, err)
		}
	}
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: pv.Spec.CSI.VolumeHandle}}}, nil
}

// releaseCloneSource removes the cloning-protection finalizer once no clone of src is
// still waiting for its volume (upstream CloningProtectionController).
func (c *Controller) releaseCloneSource(ctx context.Context, src *corev1.PersistentVolumeClaim) error {
	if !pvspec.HasFinalizer(src, pvspec.CloneFinalizer) {
		return nil
	}
	all, err := c.claimsLister().PersistentVolumeClaims(src.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, p := range all {
		ds := claimDataSource(p)
		if ds == nil || ds.Kind != kindPVC || ds.Name != src.Name || p.DeletionTimestamp != nil || p.Spec.VolumeName != "" {
			continue
		}
		if _, err := c.volumes.Get(pvspec.VolumeName(c.cfg.VolumeNamePrefix, p.UID, c.cfg.VolumeNameUUIDLength)); err == nil {
			continue // provisioned, binding pending
		}
		if _, err := c.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvspec.VolumeName(c.cfg.VolumeNamePrefix, p.UID, c.cfg.VolumeNameUUIDLength), metav1.GetOptions{}); err == nil {
			continue
		}
		return fmt.Errorf("clone %s of %s is still being provisioned", p.Name, src.Name)
	}
	_, err = write.ClaimFinalizers(c.cfg.Client).SetFinalizer(ctx, src, pvspec.CloneFinalizer, false)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Released clone source", "source", klog.KObj(src))
	}
	return err
}

func (c *Controller) snapshotSource(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, name string, requested int64) (*csi.VolumeContentSource, error) {
	if !c.cfg.Caps.Controller[csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT] {
		return nil, fmt.Errorf("CSI driver %s does not support snapshots (no CREATE_DELETE_SNAPSHOT capability)", c.cfg.DriverName)
	}
	if c.cfg.Snapshots == nil || !c.snapshotAPIInstalled() {
		return nil, fmt.Errorf("claim restores VolumeSnapshot %s, but the snapshot.storage.k8s.io/v1 CRDs are not installed: install the external-snapshotter CRDs, or remove the data source", name)
	}
	vs, err := c.cfg.Snapshots.SnapshotV1().VolumeSnapshots(claim.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("VolumeSnapshot %s/%s: %w", claim.Namespace, name, err)
	}
	if vs.DeletionTimestamp != nil {
		return nil, fmt.Errorf("VolumeSnapshot %s is being deleted", name)
	}
	contentName := ""
	if vs.Status != nil && vs.Status.BoundVolumeSnapshotContentName != nil {
		contentName = *vs.Status.BoundVolumeSnapshotContentName
	}
	if contentName == "" {
		return nil, fmt.Errorf("VolumeSnapshot %s is not bound to a VolumeSnapshotContent yet", name)
	}
	vsc, err := c.cfg.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("VolumeSnapshotContent %s of snapshot %s: %w", contentName, name, err)
	}
	ref := vsc.Spec.VolumeSnapshotRef
	st := vsc.Status
	if st == nil {
		st = &snapv1.VolumeSnapshotContentStatus{}
	}
	switch {
	case ref.Name != name || ref.Namespace != claim.Namespace || (ref.UID != "" && ref.UID != vs.UID):
		return nil, fmt.Errorf("VolumeSnapshotContent %s does not point back to snapshot %s/%s", contentName, claim.Namespace, name)
	case vsc.Spec.Driver != class.Provisioner:
		return nil, fmt.Errorf("snapshot %s was taken by driver %s, not %s", name, vsc.Spec.Driver, class.Provisioner)
	case st.ReadyToUse == nil || !*st.ReadyToUse || st.SnapshotHandle == nil || *st.SnapshotHandle == "":
		return nil, fmt.Errorf("snapshot %s is not ready to use yet", name)
	case st.RestoreSize != nil && requested < *st.RestoreSize:
		return nil, fmt.Errorf("the claim requests %d bytes but snapshot %s needs at least %d: request its restore size or more", requested, name, *st.RestoreSize)
	}
	mode := corev1.PersistentVolumeFilesystem
	if pvspec.IsBlock(claim) {
		mode = corev1.PersistentVolumeBlock
	}
	if srcMode := vsc.Spec.SourceVolumeMode; c.cfg.PreventVolumeModeConversion && srcMode != nil && *srcMode != "" && *srcMode != mode && vsc.Annotations[AnnAllowVolumeModeChange] != "true" {
		return nil, fmt.Errorf("snapshot %s was taken from a %s volume and cannot be restored as %s unless its VolumeSnapshotContent has %s: \"true\"", name, *srcMode, mode, AnnAllowVolumeModeChange)
	}
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: *st.SnapshotHandle}}}, nil
}

func (c *Controller) snapshotAPIInstalled() bool {
	_, err := c.cfg.Client.Discovery().ServerResourcesForGroupVersion(snapv1.SchemeGroupVersion.String())
	return err == nil
}

// smallerThan reports whether b bytes are less than q, for any q: a source beyond int64 is
// larger than every request (Value() would wrap it, or make it 0).
func smallerThan(b int64, q resource.Quantity) bool {
	qb, err := sizes.Bytes("", q)
	if err != nil {
		return q.Sign() > 0
	}
	return b < qb
}
