package resizer

import (
	"context"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/migration"
	"github.com/kubevol/kubevol/internal/runtime/sizes"
)

// syncClaim brings one claim's volume to the size the claim asks for, as far as the
// controller side goes.
func (c *Controller) syncClaim(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this controller made; retrying cannot help
	}
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.finalErrors.Clear(key)
		return nil
	}
	if err != nil {
		return err
	}
	pv := c.volumeOf(pvc)
	if pv == nil {
		return nil
	}
	if err := c.dropPreResize(ctx, pvc, pv); err != nil {
		return err
	}
	size, ok := c.target(key, pvc, pv)
	if !ok {
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pvc", klog.KObj(pvc), "pv", pv.Name))
	return c.expand(ctx, key, pvc.DeepCopy(), pv, size)
}

// volumeOf returns the claim's PV when this resizer is the one to expand it: the claim is
// bound to a CSI volume of our driver, and the PV is bound back to this very claim (as
// upstream checks, so a claim recreated under the same name cannot resize a stranger's PV).
func (c *Controller) volumeOf(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil
	}
	if r := pvc.Annotations[AnnStorageResizer]; r != "" && r != c.cfg.DriverName {
		return nil
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if err != nil {
		return nil // not in the cache yet: its arrival enqueues the claim again
	}
	if !c.ours(pv) {
		return nil
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID != pvc.UID || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name {
		return nil
	}
	return pv
}

// target is the size to expand the volume to now, and false when there is nothing for the
// controller to do. It follows upstream's RecoverVolumeExpansionFailure rules:
// allocatedResources is the size the resizer committed to, and it changes only when
// nothing can be in flight for it in the driver.
func (c *Controller) target(key string, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) (resource.Quantity, bool) {
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	if request.Cmp(capacity) <= 0 {
		return resource.Quantity{}, false
	}
	allocated, hasAllocated := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	pvSize := pv.Spec.Capacity[corev1.ResourceStorage]
	committed := request
	if hasAllocated {
		committed = allocated
	}
	switch pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] {
	case corev1.PersistentVolumeClaimNodeResizePending, corev1.PersistentVolumeClaimNodeResizeInProgress:
		// The controller's part is done once the PV has the committed size; the node
		// finishes, then a larger request starts the next round. A PV smaller than that
		// means the PV write was lost: the (idempotent) expansion is repeated.
		return committed, pvSize.Cmp(committed) < 0
	case corev1.PersistentVolumeClaimNodeResizeInfeasible:
		// The node failed for good at the committed size: re-arming it would only fail
		// again. A different request (the user's recovery) starts a new round.
		return request, request.Cmp(committed) != 0
	case corev1.PersistentVolumeClaimControllerResizeInfeasible:
		// The driver refused for good, so nothing is in flight: the request, possibly
		// lowered by the user since, is the new target.
		return request, true
	case corev1.PersistentVolumeClaimControllerResizeInProgress:
		if c.finalErrors.Has(key) {
			return request, true
		}
		// The last call may still be running in the driver (timeout, crash): it is
		// finished with the same size before the size may change.
		return committed, true
	default:
		if !hasAllocated && hasCondition(pvc, corev1.PersistentVolumeClaimFileSystemResizePending) && pvSize.Cmp(request) >= 0 {
			// Expanded by a resizer that predates allocatedResourceStatuses; the node finishes.
			return resource.Quantity{}, false
		}
		return request, true
	}
}

// failure classifies a failed expansion.
type failure int

const (
	// uncertain: the call may still run or have run in the driver; the same size is retried.
	uncertain failure = iota
	// failed: a final error; nothing is in flight, the claim's request may change the target.
	failed
	// infeasible: a final error that retrying the same size cannot fix.
	infeasible
)

// classify follows upstream's split: InvalidArgument, OutOfRange and NotFound make the
// expansion infeasible; errors that leave the outcome open (csiclient.MayBeInProgress) are
// uncertain; the rest are final failures. Errors before the call (secret, capability) are
// final failures, as the driver never saw the request.
func classify(err error, called bool) failure {
	if !called {
		return failed
	}
	if csiclient.MayBeInProgress(err) {
		return uncertain
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return infeasible
	}
	return failed
}

// expand runs one controller expansion of pv to size and records the result.
func (c *Controller) expand(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, size resource.Quantity) error {
	logger := klog.FromContext(ctx)
	bytes, err := sizes.Bytes("requested size", size)
	if err != nil {
		// Upstream would send Value(), wrapped, zeroed or saturated, and the driver would
		// refuse it as OutOfRange at best: the same infeasible outcome, without the call.
		return c.expandFailed(ctx, key, pvc, fmt.Errorf("cannot expand volume %s: %w", pv.Name, err), infeasible)
	}
	if c.inUseErrors.Has(key) {
		if pod := c.userOf(key); pod != "" {
			// Upstream's --handle-volume-inuse-error: the driver refused this volume while it
			// was in use, so it is not asked again until no pod uses it; the pod's end
			// enqueues the claim, so no retry is needed.
			logger.V(2).Info("Expansion waits until no pod uses the volume", "pod", pod)
			c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonFailed,
				"Unable to expand %s: CSI driver %s answered FAILED_PRECONDITION while the volume is in use by pod %s (it may expand only offline); expansion is retried once no pod uses it",
				klog.KObj(pvc), c.cfg.DriverName, pod)
			return nil
		}
		c.inUseErrors.Clear(key)
	}
	// The claim says what is being done before the driver is asked, so that a crash in
	// between leaves allocatedResources naming the size that may be in flight.
	// A new round may need the node again (upstream clears the annotation with this mark).
	if pvc, err = c.setNodeExpansionNotRequired(ctx, pvc, false); err != nil {
		return err
	}
	pvc, err = c.writeStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
		s.AllocatedResources = setQuantity(s.AllocatedResources, size)
		s.AllocatedResourceStatuses = setResizeStatus(s.AllocatedResourceStatuses, corev1.PersistentVolumeClaimControllerResizeInProgress)
		// A ControllerResizeError stays visible while the expansion is retried.
		s.Conditions = setResizeConditions(s.Conditions, corev1.PersistentVolumeClaimControllerResizeError)
		s.Conditions = setCondition(s.Conditions, corev1.PersistentVolumeClaimResizing, "")
	})
	if err != nil {
		return fmt.Errorf("marking the claim as resizing: %w", err)
	}
	c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonResizing, "External resizer is expanding volume %s to %s", pv.Name, size.String())

	newSize, nodeExpand, called, err := c.controllerExpand(ctx, pv, size, bytes)
	if err != nil {
		// Upstream remembers FAILED_PRECONDITION as an in-use error only with the flag on.
		mark(&c.inUseErrors, key, c.pods != nil && called && status.Code(err) == codes.FailedPrecondition)
		return c.expandFailed(ctx, key, pvc, err, classify(err, called))
	}
	c.finalErrors.Clear(key)
	if err := c.growPV(ctx, pv, newSize); err != nil {
		return err
	}
	if nodeExpand {
		logger.Info("Volume expanded, the node must expand it too", "size", newSize.String())
		if err := c.recordPreResize(ctx, pvc, pv); err != nil {
			return err
		}
		_, err := c.writeStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
			s.AllocatedResourceStatuses = setResizeStatus(s.AllocatedResourceStatuses, corev1.PersistentVolumeClaimNodeResizePending)
			s.Conditions = setResizeConditions(s.Conditions)
			s.Conditions = setCondition(s.Conditions, corev1.PersistentVolumeClaimFileSystemResizePending, fsResizePendingMessage)
		})
		if err != nil {
			return fmt.Errorf("marking the claim for node expansion: %w", err)
		}
		c.recorder.Event(pvc, corev1.EventTypeNormal, reasonFSResizeNeeded, "Require file system resize of volume on node: the node agent of a pod that uses the volume finishes it")
		return nil
	}
	logger.Info("Volume expanded", "size", newSize.String())
	saved, err := c.writeStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
		s.Capacity = setQuantity(s.Capacity, newSize)
		s.AllocatedResourceStatuses = setResizeStatus(s.AllocatedResourceStatuses, "")
		s.Conditions = setResizeConditions(s.Conditions)
	})
	if err != nil {
		return fmt.Errorf("marking the claim as resized: %w", err)
	}
	// The controller finished alone: the kubelet must not try a node expansion. A failure
	// only costs the kubelet a node expansion that does nothing.
	if _, err := c.setNodeExpansionNotRequired(ctx, saved, true); err != nil {
		logger.Error(err, "Marking the claim as needing no node expansion")
	}
	c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonSucceeded, "Volume %s expanded to %s", pv.Name, newSize.String())
	return nil
}

// controllerExpand asks the driver to expand pv to size. It returns the new size (size when
// the driver reports none), whether the node must expand too, and whether the driver was
// called at all.
func (c *Controller) controllerExpand(ctx context.Context, pv *corev1.PersistentVolume, size resource.Quantity, bytes int64) (resource.Quantity, bool, bool, error) {
	if !c.expands {
		// Upstream's trivial resizer: a driver that expands only on the node gets the PV
		// grown and a pending node expansion, without a call.
		return size, true, false, nil
	}
	req, err := c.expandRequest(ctx, pv, bytes)
	if err != nil {
		return size, false, false, err
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	defer cancel()
	rsp, err := c.cfg.CSI.Controller.ControllerExpandVolume(cctx, req)
	if err != nil {
		return size, false, true, err
	}
	if b := rsp.GetCapacityBytes(); b > 0 {
		size = *resource.NewQuantity(b, resource.BinarySI)
	}
	return size, rsp.GetNodeExpansionRequired(), true, nil
}

func (c *Controller) expandRequest(ctx context.Context, pv *corev1.PersistentVolume, bytes int64) (*csi.ControllerExpandVolumeRequest, error) {
	src := migration.CSISource(pv)
	if src == nil {
		return nil, fmt.Errorf("PV %s is not a CSI volume", pv.Name)
	}
	mode, err := accessmodes.ToCSIAccessMode(pv.Spec.AccessModes, c.multiWriter)
	if err != nil {
		return nil, fmt.Errorf("volume capability of PV %s: %w", pv.Name, err)
	}
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: src.FSType, MountFlags: pv.Spec.MountOptions}}
	}
	secrets, err := csiclient.FetchSecrets(ctx, c.cfg.Client, src.ControllerExpandSecretRef)
	if err != nil {
		return nil, fmt.Errorf("controller-expand secret: %w", err)
	}
	return &csi.ControllerExpandVolumeRequest{
		VolumeId:         src.VolumeHandle,
		CapacityRange:    &csi.CapacityRange{RequiredBytes: bytes},
		Secrets:          secrets,
		VolumeCapability: capability,
	}, nil
}

// expandFailed records a failed expansion where `kubectl describe` shows it (an event and,
// for final errors, the ControllerResizeError condition) and returns it, so the claim is
// retried with backoff.
func (c *Controller) expandFailed(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, cause error, kind failure) error {
	logger := klog.FromContext(ctx)
	logger.Error(cause, "Volume expansion failed", "final", kind != uncertain, "infeasible", kind == infeasible)
	c.recorder.Event(pvc, corev1.EventTypeWarning, reasonFailed, cause.Error())
	mark(&c.finalErrors, key, kind != uncertain)
	if kind == uncertain {
		// ControllerResizeInProgress stays: the same size must be retried until the driver
		// answers for good.
		return cause
	}
	_, err := c.writeStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
		if kind == infeasible {
			s.AllocatedResourceStatuses = setResizeStatus(s.AllocatedResourceStatuses, corev1.PersistentVolumeClaimControllerResizeInfeasible)
		}
		s.Conditions = setCondition(s.Conditions, corev1.PersistentVolumeClaimControllerResizeError, cause.Error())
	})
	if err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Saving the expansion error failed")
	}
	return cause
}

// growPV sets the PV's capacity to size unless it is already that large. It patches, as
// external-resizer's role grants only patch on PVs; the patch carries the cached
// resourceVersion, so a stale cache gets a conflict and a retry, never an overwrite.
func (c *Controller) growPV(ctx context.Context, pv *corev1.PersistentVolume, size resource.Quantity) error {
	if cur := pv.Spec.Capacity[corev1.ResourceStorage]; cur.Cmp(size) >= 0 {
		return nil
	}
	grown := pv.DeepCopy()
	grown.Spec.Capacity = setQuantity(grown.Spec.Capacity, size)
	if _, err := c.pvWriter.Write(ctx, pv, grown, write.Checked()); err != nil {
		return fmt.Errorf("updating the capacity of PV %s: %w", pv.Name, err)
	}
	return nil
}

// writeStatus applies change to a copy of the claim's status and saves it when it differs.
// It patches persistentvolumeclaims/status, the one claim write external-resizer's role
// grants; the patch carries the claim's resourceVersion, so a status computed from a stale
// cache fails with a conflict and the claim is retried from fresh data.
func (c *Controller) writeStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, change func(*corev1.PersistentVolumeClaimStatus)) (*corev1.PersistentVolumeClaim, error) {
	updated := pvc.DeepCopy()
	change(&updated.Status)
	if equality.Semantic.DeepEqual(pvc.Status, updated.Status) {
		return pvc, nil
	}
	return c.claimWriter.WriteStatus(ctx, pvc, updated, write.Checked())
}

func setQuantity(l corev1.ResourceList, q resource.Quantity) corev1.ResourceList {
	if l == nil {
		l = corev1.ResourceList{}
	}
	l[corev1.ResourceStorage] = q
	return l
}

// setResizeStatus sets the storage entry of allocatedResourceStatuses; "" removes it, and
// the map with it once empty.
func setResizeStatus(m map[corev1.ResourceName]corev1.ClaimResourceStatus, s corev1.ClaimResourceStatus) map[corev1.ResourceName]corev1.ClaimResourceStatus {
	if s == "" {
		delete(m, corev1.ResourceStorage)
		if len(m) == 0 {
			return nil
		}
		return m
	}
	if m == nil {
		m = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	m[corev1.ResourceStorage] = s
	return m
}

// setResizeConditions drops the resize conditions except the kept ones, and leaves every
// other condition alone.
func setResizeConditions(conds []corev1.PersistentVolumeClaimCondition, keep ...corev1.PersistentVolumeClaimConditionType) []corev1.PersistentVolumeClaimCondition {
	var out []corev1.PersistentVolumeClaimCondition
	for _, cond := range conds {
		if !resizeConditions[cond.Type] || slices.Contains(keep, cond.Type) {
			out = append(out, cond)
		}
	}
	return out
}

// setCondition sets a True condition of type t. An unchanged condition keeps its transition
// time, so a retry does not rewrite the claim for nothing.
func setCondition(conds []corev1.PersistentVolumeClaimCondition, t corev1.PersistentVolumeClaimConditionType, msg string) []corev1.PersistentVolumeClaimCondition {
	for i, cond := range conds {
		if cond.Type != t {
			continue
		}
		if cond.Status != corev1.ConditionTrue || cond.Message != msg {
			conds[i] = corev1.PersistentVolumeClaimCondition{Type: t, Status: corev1.ConditionTrue, Message: msg, LastTransitionTime: metav1.Now()}
		}
		return conds
	}
	return append(conds, corev1.PersistentVolumeClaimCondition{Type: t, Status: corev1.ConditionTrue, Message: msg, LastTransitionTime: metav1.Now()})
}

func hasCondition(pvc *corev1.PersistentVolumeClaim, t corev1.PersistentVolumeClaimConditionType) bool {
	for _, cond := range pvc.Status.Conditions {
		if cond.Type == t && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// ours reports whether pv is a volume of the driver: a CSI PV of it, or an in-tree PV of
// the plugin migrated to it, which upstream's resizer expands through its translation
// (kube-controller-manager names the driver in the claim's storage-resizer annotation).
// The PV object itself stays in-tree: only its capacity is written.
func (c *Controller) ours(pv *corev1.PersistentVolume) bool {
	src := migration.CSISource(pv)
	return src != nil && src.Driver == c.cfg.DriverName
}
