// Package reclaim is the provisioner's volume controller: for the PersistentVolumes this
// driver provisioned it keeps the deletion-protection finalizer in step with the reclaim
// policy, and when a PV with policy Delete is Released it calls CSI DeleteVolume, deletes
// the PV and removes the finalizer. It reproduces the upstream library's volume queue
// (syncVolume, handleProtectionFinalizer, deleteVolumeOperation) and ep's Delete.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/migration"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// ReasonVolumeFailedDelete is the upstream event reason on the PV.
const ReasonVolumeFailedDelete = "VolumeFailedDelete"

// Config is everything the volume controller needs.
type Config struct {
	// ControllerConfig is the client, the driver and its name, and the retry intervals;
	// the worker count is Register's.
	sidecar.ControllerConfig
	Recorder record.EventRecorder
	Metrics  *metrics.Metrics

	Volumes coreinformers.PersistentVolumeInformer
	// Attachments is nil when the driver has no PUBLISH_UNPUBLISH_VOLUME capability.
	Attachments storageinformers.VolumeAttachmentInformer
	// NodeTopology, set in a node deployment, limits deletion to the PVs accessible from
	// this node's segment (upstream: a per-node provisioner deletes only what it created).
	NodeTopology map[string]string
}

// Controller is the volume controller.
type Controller struct {
	cfg         Config
	volumes     corelisters.PersistentVolumeLister
	attachments cache.Indexer
	queue       *controller.Queue[string]
	synced      []cache.InformerSynced

	// deleted holds the PVs whose backend volume is gone, until the informer sees the PV go:
	// a stale cache must not send DeleteVolume twice (upstream #1235).
	deleted controller.Flags[types.UID]
	// pvs writes the protection finalizer with a strategic-merge patch, so that it never
	// conflicts with the PV controller's writes (upstream lib v10).
	pvs write.Writer[*corev1.PersistentVolume]
}

// New wires the controller to its informers. Call it before the informers start.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		cfg:     cfg,
		volumes: cfg.Volumes.Lister(),
		queue:   sidecar.NewQueue[string](&cfg.ControllerConfig, "volumes"),
		synced:  []cache.InformerSynced{cfg.Volumes.Informer().HasSynced},
		pvs:     write.PersistentVolumes(cfg.Client, write.Patch),
	}
	enqueue := func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && pvspec.ProvisionedBy(pv, cfg.DriverName) {
			c.queue.Add(pv.Name)
		}
	}
	if _, err := cfg.Volumes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pv, ok := obj.(*corev1.PersistentVolume); ok {
				c.deleted.Clear(pv.UID)
			}
		},
	}); err != nil {
		return nil, err
	}
	if cfg.Attachments != nil {
		// An index by PV name, so a deletion does not scan every VolumeAttachment (upstream
		// lists them all on every delete).
		inf := cfg.Attachments.Informer()
		if err := sidecar.IndexAttachmentsByPV(inf); err != nil {
			return nil, err
		}
		// A detach may be what a Released PV waits for.
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Source.PersistentVolumeName != nil {
				c.queue.Add(*va.Spec.Source.PersistentVolumeName)
			}
		}}); err != nil {
			return nil, err
		}
		c.attachments = inf.GetIndexer()
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c, nil
}

// Register adds the controller to r: it waits for its caches, then workers sync volumes.
func (c *Controller) Register(r *controller.Runner, workers int) {
	r.AddSource(controller.Synced(c.synced...))
	controller.Handle(r, c.queue, workers, c.sync)
}

// Run runs the controller alone, on informers the caller starts, until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	r := controller.NewRunner("volumes")
	c.Register(r, workers)
	_ = r.Run(ctx)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("pv", name)
	ctx = klog.NewContext(ctx, logger)
	deleting := pv.DeletionTimestamp != nil
	policyDelete := pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete

	// The finalizer follows the policy: only Delete volumes need to outlive their PV object.
	switch {
	case !policyDelete && pvspec.HasFinalizer(pv, pvspec.Finalizer):
		return c.patchFinalizer(ctx, pv, false)
	case policyDelete && !pvspec.HasFinalizer(pv, pvspec.Finalizer) && !deleting && pv.Status.Phase == corev1.VolumeBound:
		if err := c.patchFinalizer(ctx, pv, true); err != nil {
			return err
		}
	}
	if !policyDelete || pv.Status.Phase != corev1.VolumeReleased || (deleting && !pvspec.HasFinalizer(pv, pvspec.Finalizer)) {
		return nil
	}
	return c.delete(ctx, pv)
}

func (c *Controller) delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	logger := klog.FromContext(ctx)
	// An in-tree PV of the plugin migrated to the driver (the PV of a migrated claim, which
	// kube-controller-manager leaves to the driver: migrated-to) is deleted as its CSI
	// translation, as external-provisioner's Delete translates it first.
	if migration.IsInTreePV(pv) {
		csiPV, err := migration.PVToCSI(logger, pv)
		if err != nil {
			c.cfg.Recorder.Event(pv, corev1.EventTypeWarning, ReasonVolumeFailedDelete, err.Error())
			return err
		}
		if csiPV.Spec.CSI.Driver != c.cfg.DriverName {
			return nil
		}
		pv = csiPV
	}
	if pv.Spec.CSI == nil {
		return nil
	}
	if !accessibleFrom(pv, c.cfg.NodeTopology) {
		logger.V(5).Info("Not deleting: the PV was not provisioned on this node")
		return nil
	}
	logger = logger.WithValues("volumeID", pv.Spec.CSI.VolumeHandle)
	start := time.Now()
	if c.attachments != nil {
		if vas, _ := sidecar.AttachmentsOfPV(c.attachments, pv.Name); len(vas) > 0 {
			va := vas[0]
			err := fmt.Errorf("persistentvolume %s is still attached to node %s (VolumeAttachment %s): it is deleted after the detach", pv.Name, va.Spec.NodeName, va.Name)
			c.cfg.Recorder.Event(pv, corev1.EventTypeWarning, ReasonVolumeFailedDelete, err.Error())
			return err
		}
	}
	done := c.deleted.Has(pv.UID)
	if !done {
		if err := c.deleteVolume(ctx, pv); err != nil {
			return err
		}
		c.deleted.Set(pv.UID)
		logger.V(2).Info("Deleted volume")
	}
	err := c.cfg.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete PersistentVolume %s: %w", pv.Name, err)
	}
	if err := c.patchFinalizer(ctx, pv, false); err != nil {
		return err
	}
	if !done {
		c.cfg.Metrics.DeleteTotal.WithLabelValues(pv.Spec.StorageClassName).Inc()
		c.cfg.Metrics.DeleteDuration.WithLabelValues(pv.Spec.StorageClassName).Observe(time.Since(start).Seconds())
	}
	return nil
}

// deletionSecret reads the secret reference the PV was provisioned with.
func deletionSecret(pv *corev1.PersistentVolume) (*corev1.SecretReference, error) {
	name, hasName := pv.Annotations[pvspec.AnnDeletionSecretName]
	ns, hasNS := pv.Annotations[pvspec.AnnDeletionSecretNamespace]
	switch {
	case !hasName && !hasNS, name == "" && ns == "":
		return nil, nil
	case name == "" || ns == "":
		return nil, errors.New("only one of the deletion secret annotations is set")
	}
	return &corev1.SecretReference{Name: name, Namespace: ns}, nil
}

// patchFinalizer adds or removes the protection finalizer. A PV gone meanwhile is no error.
func (c *Controller) patchFinalizer(ctx context.Context, pv *corev1.PersistentVolume, add bool) error {
	_, err := c.pvs.SetFinalizer(ctx, pv, pvspec.Finalizer, add)
	return write.IgnoreNotFound(err)
}

// deleteVolume calls DeleteVolume with the deletion secret the PV names. A secret that
// cannot be read is logged and DeleteVolume proceeds without it, as upstream documents.
func (c *Controller) deleteVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	logger := klog.FromContext(ctx)
	ref, err := deletionSecret(pv)
	if err != nil {
		logger.Error(err, "Deletion secret annotations are unusable; deleting without secrets")
	}
	data, err := csiclient.FetchSecrets(ctx, c.cfg.Client, ref)
	if err != nil {
		logger.Error(err, "Cannot read the deletion secret; calling DeleteVolume without it")
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	defer cancel()
	_, err = c.cfg.CSI.Controller.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle, Secrets: data})
	if err != nil && status.Code(err) != codes.NotFound {
		c.cfg.Metrics.DeleteFailed.WithLabelValues(pv.Spec.StorageClassName).Inc()
		c.cfg.Recorder.Eventf(pv, corev1.EventTypeWarning, ReasonVolumeFailedDelete, "DeleteVolume of %s failed: %v", pv.Spec.CSI.VolumeHandle, err)
		return err
	}
	return nil
}
