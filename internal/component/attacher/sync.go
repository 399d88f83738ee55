package attacher

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/migration"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

const publishCapability = csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME

// Event reasons on the VolumeAttachment.
const (
	reasonAttachFailed = "AttachFailed"
	reasonDetachFailed = "DetachFailed"
	// reasonWriteFailed: the API server refused one of the attacher's writes.
	reasonWriteFailed = controller.ReasonWriteFailed
)

// syncAttach is the attach queue's sync, syncDetach the detach queue's.
func (c *Controller) syncAttach(ctx context.Context, name string) error {
	return c.syncVA(ctx, name, false)
}

func (c *Controller) syncDetach(ctx context.Context, name string) error {
	return c.syncVA(ctx, name, true)
}

// syncVA brings one VolumeAttachment to its desired state: attached while it lives,
// detached (and released) once it is being deleted. detaching says which queue the key
// came from: a VolumeAttachment deleted while it waited for an attach worker is handed
// to the detach queue, so that each queue's workers only ever do their own operation and
// an attach never waits for a detach worker.
func (c *Controller) syncVA(ctx context.Context, name string, detaching bool) error {
	c.syncing.Set(name)
	defer c.syncing.Clear(name)
	va, err := c.vaLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if va.Spec.Attacher != c.cfg.DriverName || c.superseded.Over(va.Name, va.ResourceVersion) {
		return nil
	}
	if deleting := va.DeletionTimestamp != nil; deleting != detaching {
		c.queueOf(va).Add(name)
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumeAttachment", va.Name, "node", va.Spec.NodeName))
	if va.DeletionTimestamp != nil {
		return c.detach(ctx, va.DeepCopy())
	}
	republish := c.republish.Take(va.Name)
	if va.Status.Attached && !republish {
		return nil
	}
	err = c.attach(ctx, va.DeepCopy())
	if err != nil && republish {
		// Upstream forgets its forceSync here and waits for the next reconcile pass; the
		// retry with backoff must publish again too.
		c.republish.Set(va.Name)
	}
	return err
}

// source is what an attach or detach needs to know about the volume.
type source struct {
	pv       *corev1.PersistentVolume // nil for inline volumes
	csi      *corev1.CSIPersistentVolumeSource
	modes    []corev1.PersistentVolumeAccessMode
	block    bool
	mountOpt []string
}

func (c *Controller) source(va *storagev1.VolumeAttachment) (*source, error) {
	s := va.Spec.Source
	switch {
	case s.PersistentVolumeName != nil && s.InlineVolumeSpec != nil:
		return nil, fmt.Errorf("both InlineVolumeSpec and PersistentVolumeName are set")
	case s.PersistentVolumeName != nil:
		pv, err := c.pvLister.Get(*s.PersistentVolumeName)
		if err != nil {
			return nil, fmt.Errorf("PersistentVolume %q: %w", *s.PersistentVolumeName, err)
		}
		// An in-tree PV of a migrated plugin is attached as its CSI translation, as
		// external-attacher does; the finalizer still goes on the PV object itself.
		csiPV := pv
		if migration.IsInTreePV(pv) {
			if csiPV, err = migration.PVToCSI(klog.Background(), pv); err != nil {
				return nil, err
			}
		}
		if csiPV.Spec.CSI == nil || csiPV.Spec.CSI.Driver != c.cfg.DriverName {
			return nil, fmt.Errorf("PersistentVolume %q is not a CSI volume of driver %s, nor an in-tree volume migrated to it", pv.Name, c.cfg.DriverName)
		}
		return &source{pv: pv, csi: csiPV.Spec.CSI, modes: pv.Spec.AccessModes, mountOpt: pv.Spec.MountOptions,
			block: pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock}, nil
	case s.InlineVolumeSpec != nil:
		// The attach/detach controller puts a pod's inline in-tree volume of a migrated
		// plugin here, translated; one still in-tree is translated as external-attacher does.
		spec, err := migration.SpecToCSI(klog.Background(), s.InlineVolumeSpec)
		if err != nil {
			return nil, fmt.Errorf("inline volume spec: %w", err)
		}
		if spec.CSI.Driver != c.cfg.DriverName {
			return nil, fmt.Errorf("inline volume spec is for driver %s, not %s", spec.CSI.Driver, c.cfg.DriverName)
		}
		return &source{csi: spec.CSI, modes: spec.AccessModes, mountOpt: spec.MountOptions,
			block: spec.VolumeMode != nil && *spec.VolumeMode == corev1.PersistentVolumeBlock}, nil
	default:
		return nil, fmt.Errorf("neither InlineCSIVolumeSource nor PersistentVolumeName specified")
	}
}

func (c *Controller) attach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	if !c.publishes {
		// Upstream's trivial handler: a driver without ControllerPublish attaches nothing.
		return c.markAttached(ctx, va, nil)
	}
	src, err := c.source(va)
	if err != nil {
		return c.attachFailed(ctx, va, err)
	}
	if src.pv != nil {
		if src.pv.DeletionTimestamp != nil {
			return c.attachFailed(ctx, va, fmt.Errorf("PersistentVolume %q is marked for deletion", src.pv.Name))
		}
		// The PV must outlive every attachment of it, so it gets our finalizer first.
		if err := c.addPVFinalizer(ctx, va, src.pv); err != nil {
			return err
		}
	}
	nodeID, err := c.nodeID(va)
	if err != nil {
		return c.attachFailed(ctx, va, err)
	}
	// The VolumeAttachment gets the finalizer and the node ID before the driver is called,
	// so a crash right after the call still leads to a ControllerUnpublish.
	before := va.ResourceVersion
	if va, err = c.ensureVAMeta(ctx, va, nodeID); err != nil {
		return err
	}
	if va.ResourceVersion != before {
		// The status write below supersedes this version, whatever its outcome.
		defer func(meta string) {
			c.superseded.Wrote(va.Name, meta, va.ResourceVersion)
		}(va.ResourceVersion)
	}
	req, err := c.publishRequest(ctx, src, nodeID)
	if err != nil {
		return c.attachFailed(ctx, va, err)
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	defer cancel()
	rsp, err := c.cfg.CSI.Controller.ControllerPublishVolume(cctx, req)
	if err != nil {
		return c.attachFailed(ctx, va, fmt.Errorf("ControllerPublishVolume: %w", err))
	}
	logger.Info("Attached", "volumeID", req.VolumeId, "nodeID", nodeID)
	return c.markAttached(ctx, va, rsp.GetPublishContext())
}

func (c *Controller) detach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	if !slices.Contains(va.Finalizers, c.finalizer()) {
		return nil // never attached by us, or already released
	}
	if c.publishes {
		nodeID := va.Annotations[nodeIDAnnotation]
		if nodeID == "" {
			var err error
			if nodeID, err = c.nodeID(va); err != nil {
				return c.detachFailed(ctx, va, err)
			}
		}
		// The PV's finalizer keeps it (and its volume handle) while this attachment exists.
		src, err := c.source(va)
		if err != nil {
			return c.detachFailed(ctx, va, err)
		}
		req := &csi.ControllerUnpublishVolumeRequest{VolumeId: src.csi.VolumeHandle, NodeId: nodeID}
		if req.Secrets, err = c.secrets(ctx, src.csi.ControllerPublishSecretRef); err != nil {
			return c.detachFailed(ctx, va, err)
		}
		cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
		defer cancel()
		if _, err := c.cfg.CSI.Controller.ControllerUnpublishVolume(cctx, req); err != nil {
			return c.detachFailed(ctx, va, fmt.Errorf("ControllerUnpublishVolume: %w", err))
		}
		logger.Info("Detached", "volumeID", req.VolumeId, "nodeID", nodeID)
	}
	// As upstream, the finalizer goes before the status changes: once it is gone the object
	// may vanish, and a second ControllerUnpublish is never made for it.
	if _, err := c.vas.SetFinalizer(ctx, va, c.finalizer(), false, write.Doing("remove the finalizer of the VolumeAttachment")); err != nil {
		return write.IgnoreNotFound(err)
	}
	if va.Spec.Source.PersistentVolumeName != nil {
		c.pvQueue.Add(*va.Spec.Source.PersistentVolumeName)
	}
	return nil
}

// nodeID maps the Kubernetes node to the driver's node ID through the CSINode object the
// node plugin registered, then through the annotation upstream also accepts.
func (c *Controller) nodeID(va *storagev1.VolumeAttachment) (string, error) {
	if n, err := c.nodes.Get(va.Spec.NodeName); err == nil {
		for _, d := range n.Spec.Drivers {
			if d.Name == c.cfg.DriverName && d.NodeID != "" {
				return d.NodeID, nil
			}
		}
	}
	if id := va.Annotations[nodeIDAnnotation]; id != "" {
		return id, nil
	}
	return "", fmt.Errorf("CSINode %s does not contain driver %s: is the driver's node plugin registered on that node?", va.Spec.NodeName, c.cfg.DriverName)
}

func (c *Controller) publishRequest(ctx context.Context, src *source, nodeID string) (*csi.ControllerPublishVolumeRequest, error) {
	caps, err := c.cfg.CSI.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	mode, err := accessmodes.ToCSIAccessMode(src.modes, caps.Controller[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER])
	if err != nil {
		return nil, err
	}
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if src.block {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		fsType := src.csi.FSType
		if fsType == "" {
			fsType = c.cfg.DefaultFSType
		}
		capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: src.mountOpt}}
	}
	req := &csi.ControllerPublishVolumeRequest{
		VolumeId:         src.csi.VolumeHandle,
		NodeId:           nodeID,
		VolumeCapability: capability,
		Readonly:         src.csi.ReadOnly,
		VolumeContext:    src.csi.VolumeAttributes,
	}
	if req.Secrets, err = c.secrets(ctx, src.csi.ControllerPublishSecretRef); err != nil {
		return nil, err
	}
	return req, nil
}

func (c *Controller) secrets(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error) {
	data, err := csiclient.FetchSecrets(ctx, c.cfg.Client, ref)
	if err != nil {
		return nil, fmt.Errorf("controller-publish secret: %w", err)
	}
	return data, nil
}

func (c *Controller) ensureVAMeta(ctx context.Context, va *storagev1.VolumeAttachment, nodeID string) (*storagev1.VolumeAttachment, error) {
	if slices.Contains(va.Finalizers, c.finalizer()) && va.Annotations[nodeIDAnnotation] == nodeID {
		return va, nil
	}
	return c.vas.Mutate(ctx, va, func(cur *storagev1.VolumeAttachment) bool {
		write.SetFinalizers(cur, true, c.finalizer())
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[nodeIDAnnotation] = nodeID
		return true
	}, write.Doing("add the finalizer and node ID to the VolumeAttachment"))
}

func (c *Controller) addPVFinalizer(ctx context.Context, va *storagev1.VolumeAttachment, pv *corev1.PersistentVolume) error {
	if slices.Contains(pv.Finalizers, c.finalizer()) {
		return nil
	}
	_, err := c.pvs.SetFinalizer(ctx, pv, c.finalizer(), true, write.On(va), write.Doing(fmt.Sprintf("add the finalizer to PersistentVolume %s", pv.Name)))
	return err
}

// markAttached and the error recorders update va in place, resourceVersion included, so the
// caller knows which version its last write produced.
func (c *Controller) markAttached(ctx context.Context, va *storagev1.VolumeAttachment, metadata map[string]string) error {
	return c.writeStatus(ctx, va, storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: metadata}, "mark the VolumeAttachment attached")
}

// writeStatus patches va's status to status and updates va in place; what names the write
// in the error.
func (c *Controller) writeStatus(ctx context.Context, va *storagev1.VolumeAttachment, status storagev1.VolumeAttachmentStatus, what string) error {
	cur := va.DeepCopy()
	cur.Status = status
	updated, err := c.vas.WriteStatus(ctx, va, cur, write.Doing(what))
	if err != nil {
		return err
	}
	va.Status = status
	if updated != va {
		c.unobserved.Wrote(va.Name, va.ResourceVersion, updated.ResourceVersion)
		va.ResourceVersion = updated.ResourceVersion
	}
	return nil
}

// volumeError is the status record of a failed attach or detach. Like external-attacher
// v4.10+, errorCode carries the gRPC code of a driver's error (the attach/detach
// controller and the scheduler read ResourceExhausted from it); errors that never reached
// the driver have none.
func volumeError(cause error) *storagev1.VolumeError {
	e := &storagev1.VolumeError{Message: cause.Error(), Time: metav1.Now()}
	var se interface{ GRPCStatus() *grpcstatus.Status }
	if errors.As(cause, &se) {
		code := int32(se.GRPCStatus().Code())
		e.ErrorCode = &code
	}
	return e
}

// attachFailed records the error where `kubectl describe` and the attach/detach controller
// see it (status.attachError and an event) and returns it so the key is retried.
func (c *Controller) attachFailed(ctx context.Context, va *storagev1.VolumeAttachment, cause error) error {
	klog.FromContext(ctx).Error(cause, "Attach failed")
	c.recorder.Event(va, corev1.EventTypeWarning, reasonAttachFailed, cause.Error())
	st := *va.Status.DeepCopy()
	st.AttachError = volumeError(cause)
	_ = c.writeStatus(ctx, va, st, "save status.attachError") // refusals are reported; the cause is retried
	return cause
}

func (c *Controller) detachFailed(ctx context.Context, va *storagev1.VolumeAttachment, cause error) error {
	klog.FromContext(ctx).Error(cause, "Detach failed")
	c.recorder.Event(va, corev1.EventTypeWarning, reasonDetachFailed, cause.Error())
	st := *va.Status.DeepCopy()
	st.DetachError = volumeError(cause)
	_ = c.writeStatus(ctx, va, st, "save status.detachError") // refusals are reported; the cause is retried
	return cause
}

// syncPV removes the attacher's finalizer from a PV that no VolumeAttachment names any more.
func (c *Controller) syncPV(ctx context.Context, name string) error {
	pv, err := c.pvLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !slices.Contains(pv.Finalizers, c.finalizer()) {
		return nil
	}
	vas, err := sidecar.AttachmentsOfPV(c.vaIndex, name)
	if err != nil {
		return err
	}
	if len(vas) > 0 {
		return nil // a VolumeAttachment's deletion enqueues the PV again
	}
	if _, err := c.pvs.SetFinalizer(ctx, pv, c.finalizer(), false, write.Doing(fmt.Sprintf("cannot remove the finalizer of PersistentVolume %s", name))); write.IgnoreNotFound(err) != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Released PersistentVolume", "pv", name)
	return nil
}
