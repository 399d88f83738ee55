package resizer

import (
	"context"
	"fmt"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// ModifyConfig configures volume modification: a claim's spec.volumeAttributesClassName
// turned into ControllerModifyVolume with the class's parameters (external-resizer's modify
// controller, KEP-3751).
type ModifyConfig struct {
	// Enabled is upstream's VolumeAttributesClass feature gate. Modification runs only when
	// it is on and the driver has MODIFY_VOLUME.
	Enabled bool
	// ExtraMetadata (upstream --extra-modify-metadata) adds the claim's name and namespace
	// and the PV's name to the parameters.
	ExtraMetadata bool
}

// modifier is the modification half of the Controller: its own queue, so that its
// retries and backoff are its own as upstream's, and the per-claim memory of outcomes.
type modifier struct {
	cfg     ModifyConfig
	queue   *controller.Queue[string]
	classes storagelisters.VolumeAttributesClassLister
	// finalErrors holds the claims whose last ControllerModifyVolume failed for good, so
	// nothing is in flight and the target may follow the claim's spec again. After a
	// restart it is empty: a claim InProgress keeps its target until the driver answers
	// for good (upstream's uncertain claims).
	finalErrors controller.Flags[string]
	// infeasible holds, per claim, the class the driver refused with INVALID_ARGUMENT: that
	// class is tried again only after --retry-interval-max (upstream's slow set).
	infeasible controller.Flags[classOf]
}

// classOf is a claim's key and the name of a class.
type classOf struct{ claim, class string }

// setInfeasible flags class as the one the driver refused for key, replacing another.
func (m *modifier) setInfeasible(key, class string) {
	m.clearInfeasible(key)
	m.infeasible.Set(classOf{key, class})
}

// clearInfeasible drops the refused class of key.
func (m *modifier) clearInfeasible(key string) {
	m.infeasible.ClearIf(func(k classOf) bool { return k.claim == key })
}

// setupModify adds the modification controller when the gate is on and the driver can
// modify volumes.
func (c *Controller) setupModify(ctx context.Context, factory informers.SharedInformerFactory, driverModifies bool) error {
	logger := klog.FromContext(ctx)
	if !c.cfg.Modify.Enabled {
		return nil
	}
	if !driverModifies {
		logger.Info("Modify not supported: the driver lacks MODIFY_VOLUME")
		return nil
	}
	m := &modifier{
		cfg:   c.cfg.Modify,
		queue: sidecar.NewQueue[string](&c.cfg.ControllerConfig, "persistentvolumeclaims-modify"),
	}
	m.infeasible.Window = c.cfg.RetryIntervalMax
	classInformer := factory.Storage().V1().VolumeAttributesClasses()
	m.classes = classInformer.Lister()
	c.mod = m
	_, err := factory.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: m.enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.PersistentVolumeClaim)
			cur, ok2 := newObj.(*corev1.PersistentVolumeClaim)
			// The class asked for, binding, and every resync; the controller's own status
			// writes are left out, so a failure keeps its backoff, except the one that
			// finished a modification short of the spec (the target was kept while the
			// user changed the spec): the next one starts from it.
			if ok1 && ok2 && old.ResourceVersion != cur.ResourceVersion &&
				ptr.Deref(old.Spec.VolumeAttributesClassName, "") == ptr.Deref(cur.Spec.VolumeAttributesClassName, "") &&
				old.Status.Phase == cur.Status.Phase && old.Spec.VolumeName == cur.Spec.VolumeName && !behindSpec(cur) {
				return
			}
			m.enqueue(newObj)
		},
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				m.queue.Forget(key)
				m.finalErrors.Clear(key)
				m.clearInfeasible(key)
			}
		},
	})
	if err != nil {
		return err
	}
	_, err = factory.Core().V1().PersistentVolumes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == c.cfg.DriverName {
				m.queue.Add(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	// A class created after the claims that name it ends their Pending state at once.
	_, err = classInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if vac, ok := obj.(*storagev1.VolumeAttributesClass); ok {
				c.enqueueClaimsOfClass(vac.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	controller.Handle(c.runner, m.queue, c.cfg.Workers, c.serialised(c.syncModify))
	return nil
}

// behindSpec reports a claim that finished a modification but not the one its spec asks for.
func behindSpec(pvc *corev1.PersistentVolumeClaim) bool {
	spec := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	return pvc.Status.ModifyVolumeStatus == nil && spec != "" && spec != ptr.Deref(pvc.Status.CurrentVolumeAttributesClassName, "")
}

func (m *modifier) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		m.queue.Add(key)
	}
}

func (c *Controller) enqueueClaimsOfClass(name string) {
	claims, err := c.claims.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pvc := range claims {
		if ptr.Deref(pvc.Spec.VolumeAttributesClassName, "") == name {
			c.mod.enqueue(pvc)
		}
	}
}

// serialised runs sync under the claim's lock, shared by expansion and modification, and
// only on a cached claim this controller has not written over yet.
func (c *Controller) serialised(sync controller.Sync[string]) controller.Sync[string] {
	return func(ctx context.Context, key string) error {
		defer c.locks.lock(key)()
		if !c.cachedCurrent(key) {
			return nil // the delivery of our newer version enqueues the claim again
		}
		return sync(ctx, key)
	}
}

// cachedCurrent reports whether neither the cached claim of key nor its cached PV is a
// version this controller wrote over.
func (c *Controller) cachedCurrent(key string) bool {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return true
	}
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		return true
	}
	if c.superseded.Over(key, pvc.ResourceVersion) {
		return false
	}
	if pvc.Spec.VolumeName == "" {
		return true
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	return err != nil || !c.superseded.Over(pv.Name, pv.ResourceVersion)
}

// syncModify brings one claim's volume to the VolumeAttributesClass the claim asks for.
func (c *Controller) syncModify(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.mod.finalErrors.Clear(key)
		c.mod.clearInfeasible(key)
		return nil
	}
	if err != nil {
		return err
	}
	pv := c.volumeOf(pvc)
	if pv == nil || pv.Spec.CSI == nil {
		// An in-tree PV of a migrated plugin expands but is never modified: a
		// VolumeAttributesClass is a CSI feature, and upstream's modify controller takes
		// only CSI PVs.
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pvc", klog.KObj(pvc), "pv", pv.Name))
	return c.modify(ctx, key, pvc, pv)
}

// modify decides what the claim needs, following upstream's rules: the class the claim
// asks for (spec) is reached when the status names it as current and no modification is
// recorded; a modification whose call may still run in the driver keeps its target; one
// that failed for good may be redirected, also back to the current class (rollback).
func (c *Controller) modify(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	m := c.mod
	spec := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	current := ptr.Deref(pvc.Status.CurrentVolumeAttributesClassName, "")
	st := pvc.Status.ModifyVolumeStatus
	if st == nil && spec == current {
		m.finalErrors.Clear(key)
		return nil
	}
	inProgress := st != nil && st.Status == corev1.PersistentVolumeClaimModifyVolumeInProgress
	if spec == "" && !inProgress {
		// The user took the class back before it was ever applied: nothing is in flight,
		// so the volume stays as it is.
		return c.modifyCancelled(ctx, pvc)
	}
	if inProgress && (spec == "" || !m.finalErrors.Has(key)) {
		// The last call may still run in the driver (a timeout, a restart): it is
		// finished with the same class before the target may change.
		vac, err := c.modifyClass(pvc, st.TargetVolumeAttributesClassName)
		if err != nil {
			return err
		}
		return c.controllerModify(ctx, key, pvc, pv, vac)
	}
	if m.infeasible.Has(classOf{key, spec}) {
		// The driver refused this very class for good: it is asked again only at the slow
		// rate (upstream's slow set); another class goes ahead at once. The mark names the
		// class, so a cache that lags behind the Infeasible write cannot clear it.
		return controller.RetryAfter(m.infeasible.Remaining(classOf{key, spec}))
	}
	vac, err := c.modifyClass(pvc, spec)
	if apierrors.IsNotFound(err) {
		// Upstream's pending class: the claim waits for the class, which enqueues it.
		klog.FromContext(ctx).Info("Modification waits for its VolumeAttributesClass", "class", spec)
		_, err := c.markModify(ctx, pvc, corev1.PersistentVolumeClaimModifyVolumePending, spec, nil)
		return err
	}
	if err != nil {
		return err
	}
	pvc, err = c.markModify(ctx, pvc, corev1.PersistentVolumeClaimModifyVolumeInProgress, spec, nil)
	if err != nil {
		return err
	}
	c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonModify, "external resizer is modifying volume %s with vac %s", pvc.Name, vac.Name)
	return c.controllerModify(ctx, key, pvc, pv, vac)
}

// modifyClass reads a class from the cache; a missing one is a VolumeModifyFailed event.
func (c *Controller) modifyClass(pvc *corev1.PersistentVolumeClaim, name string) (*storagev1.VolumeAttributesClass, error) {
	vac, err := c.mod.classes.Get(name)
	if apierrors.IsNotFound(err) {
		c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonModifyFailed, "VAC %q does not exist.", name)
	}
	return vac, err
}

// controllerModify calls ControllerModifyVolume with the class's parameters and records
// the outcome. A failure is returned, so the claim is retried with backoff; an infeasible
// class is retried at the slow rate.
func (c *Controller) controllerModify(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, vac *storagev1.VolumeAttributesClass) error {
	m := c.mod
	logger := klog.FromContext(ctx).WithValues("class", vac.Name)
	req, err := c.modifyRequest(ctx, pvc, pv, vac)
	if err != nil {
		// The driver never saw the request: nothing is in flight.
		m.finalErrors.Set(key)
		logger.Error(err, "Volume modification failed before the call")
		c.recorder.Event(pvc, corev1.EventTypeWarning, reasonModifyFailed, err.Error())
		return err
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	_, err = c.cfg.CSI.Controller.ControllerModifyVolume(cctx, req)
	cancel()
	if err == nil {
		m.finalErrors.Clear(key)
		m.clearInfeasible(key)
		if err := c.modifyDone(ctx, pvc, pv, vac.Name); err != nil {
			return err
		}
		logger.Info("Volume modified")
		c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonModified, "external resizer modified volume %s with vac %s successfully", pvc.Name, vac.Name)
		return nil
	}
	state := corev1.PersistentVolumeClaimModifyVolumeInProgress
	msg := err.Error()
	final := !csiclient.MayBeInProgress(err)
	switch {
	case !final:
		m.finalErrors.Clear(key)
		msg += ". Still modifying to VAC " + vac.Name
	case status.Code(err) == codes.InvalidArgument:
		// Only INVALID_ARGUMENT makes a class infeasible, as upstream.
		state = corev1.PersistentVolumeClaimModifyVolumeInfeasible
		m.finalErrors.Set(key)
		m.setInfeasible(key, vac.Name)
	default:
		m.finalErrors.Set(key)
	}
	logger.Error(err, "Volume modification failed", "final", final, "infeasible", state == corev1.PersistentVolumeClaimModifyVolumeInfeasible)
	if _, werr := c.markModify(ctx, pvc, state, vac.Name, err); werr != nil && !apierrors.IsNotFound(werr) {
		logger.Error(werr, "Saving the modification error failed")
	}
	c.recorder.Event(pvc, corev1.EventTypeWarning, reasonModifyFailed, msg)
	if state == corev1.PersistentVolumeClaimModifyVolumeInfeasible {
		return controller.RetryAfter(c.cfg.RetryIntervalMax)
	}
	return err
}

// modifyRequest builds the ControllerModifyVolume request: the class's parameters (plus
// the claim and PV names with --extra-modify-metadata) and the controller-modify secret.
func (c *Controller) modifyRequest(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, vac *storagev1.VolumeAttributesClass) (*csi.ControllerModifyVolumeRequest, error) {
	params := maps.Clone(vac.Parameters)
	if c.mod.cfg.ExtraMetadata {
		if params == nil {
			params = map[string]string{}
		}
		params[paramPVCName] = pvc.Name
		params[paramPVCNamespace] = pvc.Namespace
		params[paramPVName] = pv.Name
	}
	secrets, err := csiclient.FetchSecrets(ctx, c.cfg.Client, modifySecretRef(pv))
	if err != nil {
		return nil, fmt.Errorf("controller-modify secret: %w", err)
	}
	return &csi.ControllerModifyVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle, MutableParameters: params, Secrets: secrets}, nil
}

// modifySecretRef is the secret of ControllerModifyVolume, as upstream finds it: the PV's
// controller-modify annotations, which the provisioner copies from the StorageClass's
// csi.storage.k8s.io/controller-modify-secret-name/-namespace; else the controller-expand
// secret.
func modifySecretRef(pv *corev1.PersistentVolume) *corev1.SecretReference {
	name, ns := pv.Annotations[pvspec.AnnModifySecretName], pv.Annotations[pvspec.AnnModifySecretNamespace]
	if name != "" && ns != "" {
		return &corev1.SecretReference{Name: name, Namespace: ns}
	}
	return pv.Spec.CSI.ControllerExpandSecretRef
}
