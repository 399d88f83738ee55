package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/provisioner/intent"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/migration"
)

const csiPluginTopology = csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS

// Event reasons, as upstream.
const (
	ReasonProvisioning          = "Provisioning"
	ReasonProvisioningSucceeded = "ProvisioningSucceeded"
	ReasonProvisioningFailed    = "ProvisioningFailed"
	// ReasonProvisioningUnrecorded is kubevol's: the claim could not carry the record that
	// makes its provisioning leak-free.
	ReasonProvisioningUnrecorded = "ProvisioningUnrecorded"
)

// addressedToUs: the PVC names this driver as its provisioner (GA key, then beta key, then
// migrated-to), as the upstream library's shouldProvision reads it.
func (c *Controller) addressedToUs(pvc *corev1.PersistentVolumeClaim) bool {
	p, ok := pvc.Annotations[pvspec.AnnStorageProvisioner]
	if !ok {
		p = pvc.Annotations[pvspec.AnnBetaStorageProvisioner]
	}
	return p == c.cfg.DriverName || pvc.Annotations[pvspec.AnnMigratedTo] == c.cfg.DriverName
}

func (c *Controller) sync(ctx context.Context, uid types.UID) error {
	claim := c.claimByUID(uid)
	if claim != nil {
		if err := c.moveLegacyRecord(ctx, claim); err != nil {
			return err
		}
	}
	rec, inFlight := c.cfg.Journal.Get(uid)
	if claim == nil || claim.DeletionTimestamp != nil {
		if claim != nil && pvspec.HasFinalizer(claim, pvspec.CloneFinalizer) {
			if err := c.releaseCloneSource(ctx, claim); err != nil {
				return err
			}
		}
		if inFlight {
			return c.cleanup(ctx, rec)
		}
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pvc", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)

	if claim.Spec.VolumeName != "" || !c.addressedToUs(claim) {
		if inFlight {
			return c.cleanup(ctx, rec)
		}
		return nil
	}
	className := pvspec.ClaimClass(claim)
	class, err := c.classes.Get(className)
	if err != nil {
		// The PV controller only hands us claims with a class; it may still be on its way.
		logger.V(2).Info("StorageClass not found; waiting for it", "storageClass", className)
		return fmt.Errorf("storageclass %q: %w", className, err)
	}
	migrated := c.migrates(class)
	if class.Provisioner != c.cfg.DriverName && !migrated {
		return nil
	}
	if migrated {
		// A claim of an in-tree class that kube-controller-manager handed to the driver
		// through CSI migration is provisioned from the class translated to CSI
		// (parameters, fsType, topology), as external-provisioner's prepareProvision does;
		// its PV is written in its in-tree form (provision). The node check below reads the
		// translated topology too.
		csiClass, err := migration.ClassToCSI(logger, class)
		if err != nil {
			c.cfg.Metrics.ProvisionFailed.WithLabelValues(class.Name, dataSourceKind(claim)).Inc()
			c.failed(ctx, claim, err)
			return err
		}
		class = csiClass
	}
	if mine, err := c.checkNode(ctx, claim, class); !mine {
		return err // another node's claim, or one this node is still waiting to take
	}
	selectedNode := claim.Annotations[pvspec.AnnSelectedNode]
	if class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && selectedNode == "" {
		return nil // the scheduler picks a node first
	}

	pvName := pvspec.VolumeName(c.cfg.VolumeNamePrefix, claim.UID, c.cfg.VolumeNameUUIDLength)
	// The real PV name, whatever the prefix: upstream checks "pvc-<uid>" only, so with
	// another --volume-name-prefix its early exit for an existing PV never fires.
	if _, err := c.volumes.Get(pvName); err == nil {
		c.saved.Clear(uid)
		c.cfg.Journal.Remove(uid)
		return nil
	}
	if wait := c.saved.Remaining(uid); wait > 0 {
		return controller.RetryAfter(wait) // our PV is on its way into the cache
	}
	return c.provision(ctx, claim, class, pvName, selectedNode, migrated)
}

// provision provisions the claim from class; migrated: class is the CSI translation of an
// in-tree class, and the PV is written in-tree.
func (c *Controller) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, pvName, selectedNode string, migrated bool) error {
	logger := klog.FromContext(ctx).WithValues("pv", pvName)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	source := dataSourceKind(claim)
	c.cfg.Recorder.Eventf(claim, corev1.EventTypeNormal, ReasonProvisioning,
		"External provisioner is provisioning volume for claim %q", klog.KObj(claim).String())

	p, err := c.prepare(ctx, claim, class, pvName, selectedNode)
	if err != nil {
		var stop *stopError
		if errors.As(err, &stop) {
			return nil
		}
		c.cfg.Metrics.ProvisionFailed.WithLabelValues(class.Name, source).Inc()
		var inf *infeasibleError
		if errors.As(err, &inf) {
			// As upstream's infeasible errors: a slow retry, as the claim's size cannot change.
			err = fmt.Errorf("cannot provision volume with StorageClass %q: %w; retries will be delayed by %s", class.Name, err, c.cfg.RetryIntervalMax)
			c.failed(ctx, claim, err)
			return controller.RetryAfter(c.cfg.RetryIntervalMax)
		}
		var rs *rescheduleError
		if errors.As(err, &rs) && selectedNode != "" {
			c.failed(ctx, claim, err)
			return c.reschedule(ctx, claim, err)
		}
		c.failed(ctx, claim, err)
		return err
	}

	reqNoSecrets := proto.Clone(p.req).(*csi.CreateVolumeRequest)
	reqNoSecrets.Secrets = nil
	raw, err := proto.Marshal(reqNoSecrets)
	if err != nil {
		return err
	}
	err = c.cfg.Journal.Add(ctx, claim, intent.Record{PVName: pvName, Request: raw, Secret: p.secrets.Provisioner})
	switch {
	case errors.Is(err, intent.ErrUnrecorded):
		// Upstream's behaviour, said once per claim: without the record a crash before the
		// PV is saved, with the claim deleted meanwhile, leaves the volume on the backend.
		msg := fmt.Sprintf("provisioning without a durable record (%v): grant the provisioner create and update on leases in its namespace, as external-provisioner's role does", err)
		logger.Error(err, "Provisioning without a durable record; a crash before the PV is saved could leak the volume if the claim is deleted meanwhile")
		c.cfg.Recorder.Event(claim, corev1.EventTypeWarning, ReasonProvisioningUnrecorded, msg)
	case err != nil:
		logger.Error(err, "Cannot record the provisioning intent; not calling CreateVolume")
		return err
	}

	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	rsp, err := c.cfg.CSI.Controller.CreateVolume(cctx, p.req)
	cancel()
	if err != nil {
		return c.createFailed(ctx, claim, class, source, selectedNode, err)
	}
	vol := rsp.GetVolume()
	c.cfg.Journal.SetVolumeID(claim.UID, vol.GetVolumeId())
	logger = logger.WithValues("volumeID", vol.GetVolumeId())
	ctx = klog.NewContext(ctx, logger)

	if vol.GetCapacityBytes() != 0 && vol.GetCapacityBytes() < p.requestedBytes {
		err := fmt.Errorf("created volume capacity %d is less than the requested %d bytes: the driver is at fault; the volume was deleted", vol.GetCapacityBytes(), p.requestedBytes)
		c.failed(ctx, claim, err)
		return errors.Join(err, c.cleanup(ctx, c.mustRecord(claim.UID)))
	}
	if p.req.GetVolumeContentSource() != nil && vol.GetContentSource() == nil {
		err := errors.New("the driver ignored the volume data source; the empty volume was deleted")
		c.failed(ctx, claim, err)
		return errors.Join(err, c.cleanup(ctx, c.mustRecord(claim.UID)))
	}

	// The claim may have gone while CreateVolume ran (upstream #486): delete the volume now
	// instead of making a PV for nobody.
	if cur := c.claimByUID(claim.UID); cur == nil || cur.DeletionTimestamp != nil {
		logger.Info("Claim was deleted while its volume was being created; deleting the volume")
		return c.cleanup(ctx, c.mustRecord(claim.UID))
	}

	pv := pvspec.Build(pvspec.Input{
		Name: pvName, Driver: c.cfg.DriverName, Identity: c.cfg.Identity, Claim: claim, Class: class,
		Volume: vol, RequestedBytes: p.requestedBytes, FSType: p.fsType, Secrets: p.secrets,
		Topology: c.topology, ControllerPublishReadOnly: c.cfg.ControllerPublishReadOnly,
	})
	if migrated {
		// The PV of a migrated claim is the in-tree plugin's (upstream: TranslateCSIPVToInTree),
		// provisioned-by the in-tree name, so that clusters and tools that read in-tree PVs
		// keep working and the PV controller marks it migrated-to the driver. A volume whose
		// PV cannot be written so is deleted again.
		inTree, err := migration.PVToInTree(pv)
		if err != nil {
			c.failed(ctx, claim, fmt.Errorf("%w; the volume just created was deleted again", err))
			return errors.Join(err, c.cleanup(ctx, c.mustRecord(claim.UID)))
		}
		pv = inTree
	}
	if err := c.savePV(ctx, claim, pv, vol.GetVolumeId()); err != nil {
		return err
	}
	// The informer stores the PV before it calls the handler that forgets the mark, so
	// checking the cache under the set's lock cannot miss that handler.
	c.saved.SetUnless(claim.UID, func() bool { _, err := c.volumes.Get(pvName); return err == nil })
	// The PV owns the volume now; the record goes with the journal's next write.
	c.cfg.Journal.Remove(claim.UID)
	c.cfg.Metrics.ProvisionTotal.WithLabelValues(class.Name, source).Inc()
	c.cfg.Metrics.ProvisionDuration.WithLabelValues(class.Name, source).Observe(time.Since(start).Seconds())
	c.cfg.Recorder.Eventf(claim, corev1.EventTypeNormal, ReasonProvisioningSucceeded, "Successfully provisioned volume %s", pvName)
	logger.V(2).Info("Provisioned volume")
	if source == kindPVC {
		// The clone has its data: the source may go once no other clone waits for it.
		if src, err := c.claimsLister().PersistentVolumeClaims(claim.Namespace).Get(claimDataSource(claim).Name); err == nil {
			if err := c.releaseCloneSource(ctx, src); err != nil {
				logger.V(2).Info("Could not release the clone source yet", "err", err)
			}
		}
	}
	return nil
}

func (c *Controller) mustRecord(uid types.UID) intent.Record {
	r, _ := c.cfg.Journal.Get(uid)
	return r
}

// savePV creates the PV. A PV of that name that already exists is accepted only if it is
// this driver's PV for this claim and volume (upstream accepts any, issue #1469); otherwise
// the volume just created is a duplicate and is deleted.
func (c *Controller) savePV(ctx context.Context, claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, handle string) error {
	logger := klog.FromContext(ctx)
	_, err := c.cfg.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		if controller.Refused(err) {
			err = controller.WriteFailed(ctx, c.cfg.Recorder, claim, "create", "persistentvolumes", err)
		} else {
			logger.Error(err, "Saving the PersistentVolume failed; will retry (the volume stays recorded in the intent journal)")
		}
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	existing, gerr := c.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if gerr != nil {
		return fmt.Errorf("PersistentVolume %s exists but cannot be read: %w", pv.Name, gerr)
	}
	if mismatch := pvspec.SameVolume(existing, c.cfg.DriverName, claim, handle); mismatch != nil {
		c.failed(ctx, claim, fmt.Errorf("%w; the volume just created was deleted again", mismatch))
		if pvspec.Handle(existing) == handle && existing.DeletionTimestamp == nil {
			// Same backend volume, now owned by that PV: deleting it would destroy its data.
			c.cfg.Journal.Remove(claim.UID)
			return nil
		}
		return c.cleanup(ctx, c.mustRecord(claim.UID))
	}
	logger.V(2).Info("PersistentVolume already exists and matches")
	return nil
}

func (c *Controller) createFailed(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, source, selectedNode string, err error) error {
	logger := klog.FromContext(ctx)
	c.cfg.Metrics.ProvisionFailed.WithLabelValues(class.Name, source).Inc()
	if !csiclient.MayBeInProgress(err) {
		// A final answer: nothing was created.
		c.cfg.Journal.Remove(claim.UID)
	}
	code := status.Code(err)
	switch {
	case code == codes.ResourceExhausted && c.topology && selectedNode != "":
		c.failed(ctx, claim, fmt.Errorf("failed to provision volume with StorageClass %q: %w", class.Name, err))
		return c.reschedule(ctx, claim, err)
	case code == codes.InvalidArgument:
		// Infeasible until someone changes the class or the claim. Upstream waits a fixed
		// 5 minutes here, ignoring --retry-interval-max (its slowSet bug).
		c.cfg.Recorder.Eventf(claim, corev1.EventTypeWarning, ReasonProvisioningFailed,
			"failed to provision volume with StorageClass %q: %v; this is an infeasible error, retries will be delayed by %s: check the StorageClass parameters and the claim",
			class.Name, err, c.cfg.RetryIntervalMax)
		logger.Info("CreateVolume refused the request as infeasible", "err", err, "retryIn", c.cfg.RetryIntervalMax)
		return controller.RetryAfter(c.cfg.RetryIntervalMax)
	}
	c.failed(ctx, claim, fmt.Errorf("failed to provision volume with StorageClass %q: %w", class.Name, err))
	return err
}

func (c *Controller) failed(ctx context.Context, claim *corev1.PersistentVolumeClaim, err error) {
	klog.FromContext(ctx).Info("Provisioning failed", "err", err)
	c.cfg.Recorder.Event(claim, corev1.EventTypeWarning, ReasonProvisioningFailed, err.Error())
}

// reschedule removes selected-node so that the scheduler picks another node (upstream
// rescheduleProvisioning). It is only called after a final answer, never while a
// CreateVolume may still run.
func (c *Controller) reschedule(ctx context.Context, claim *corev1.PersistentVolumeClaim, cause error) error {
	// An update, the claim write external-provisioner's role grants; a conflict retries
	// from a fresh copy.
	cur := claim.DeepCopy()
	delete(cur.Annotations, pvspec.AnnSelectedNode)
	_, err := c.claimWriter().Write(ctx, claim, cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reschedule: remove %s: %w", pvspec.AnnSelectedNode, err)
	}
	klog.FromContext(ctx).Info("Asked the scheduler to pick another node", "node", claim.Annotations[pvspec.AnnSelectedNode], "cause", cause)
	return nil
}

// claimWriter writes claims with update, the one claim write external-provisioner's role
// grants; a refusal is reported on the claim.
func (c *Controller) claimWriter() write.Writer[*corev1.PersistentVolumeClaim] {
	w := write.Claims(c.cfg.Client, write.Update, write.Update)
	w.Recorder = c.cfg.Recorder
	return w
}

// cleanup deletes the backend volume of a record whose claim no longer wants it, unless a
// PV already owns the volume. Without a known volume ID it repeats the recorded
// CreateVolume, which CSI makes idempotent by name, to learn it.
func (c *Controller) cleanup(ctx context.Context, rec intent.Record) error {
	logger := klog.FromContext(ctx).WithValues("pvc", klog.KRef(rec.Namespace, rec.Claim), "pv", rec.PVName)
	if rec.PVName == "" {
		c.cfg.Journal.Remove(rec.ClaimUID) // an unreadable record: nothing to go by
		return nil
	}
	pv, err := c.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, rec.PVName, metav1.GetOptions{})
	switch {
	case err == nil && c.ownsVolume(pv, rec):
		c.cfg.Journal.Remove(rec.ClaimUID) // the PV owns the volume; the reclaim controller deletes it
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	secrets, err := fetchSecret(ctx, c.cfg.Client, rec.Secret)
	if err != nil {
		logger.Error(err, "Cannot read the provisioner secret for the cleanup; trying without it")
	}
	id := rec.VolumeID
	if id == "" {
		// Only a record still in the journal may lead to a CreateVolume: a copy of one this
		// process dropped after deleting the volume would create it again, and a crash
		// before the DeleteVolume below would leak it.
		if cur, ok := c.cfg.Journal.Get(rec.ClaimUID); !ok || cur.PVName != rec.PVName {
			logger.V(2).Info("The provisioning record is no longer in the journal; nothing to clean up")
			return nil
		}
		req := &csi.CreateVolumeRequest{}
		if err := proto.Unmarshal(rec.Request, req); err != nil || len(rec.Request) == 0 {
			logger.Error(err, "Provisioning record holds no readable request: the volume's ID cannot be learned, and a volume the driver may have created for it is left on the backend", "volumeName", rec.PVName)
			c.cfg.Journal.Remove(rec.ClaimUID)
			return nil
		}
		req.Secrets = secrets
		cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
		rsp, err := c.cfg.CSI.Controller.CreateVolume(cctx, req)
		cancel()
		switch {
		case err != nil && csiclient.MayBeInProgress(err):
			return fmt.Errorf("cleanup of %s: CreateVolume to find the volume: %w", rec.PVName, err)
		case err != nil:
			logger.V(2).Info("No volume to clean up: CreateVolume gives a final error", "err", err)
			c.cfg.Journal.Remove(rec.ClaimUID)
			return nil
		}
		id = rsp.GetVolume().GetVolumeId()
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	_, err = c.cfg.CSI.Controller.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets})
	cancel()
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("cleanup of %s: DeleteVolume %s: %w", rec.PVName, id, err)
	}
	logger.Info("Deleted a volume whose claim is gone", "volumeID", id)
	c.cfg.Journal.Remove(rec.ClaimUID)
	return nil
}

// moveLegacyRecord moves a record that an earlier release left on the claim into the
// journal, then removes it from the claim: its finalizer is no longer needed, the journal
// names the volume after the claim is gone.
func (c *Controller) moveLegacyRecord(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	rec, ok := c.cfg.Journal.Legacy(claim)
	if !ok {
		return nil
	}
	if _, known := c.cfg.Journal.Get(claim.UID); !known {
		if err := c.cfg.Journal.Add(ctx, claim, rec); err != nil && !errors.Is(err, intent.ErrUnrecorded) {
			return err
		}
	}
	return c.cfg.Journal.ReleaseLegacy(ctx, claim)
}

// ownsVolume reports whether pv is this driver's live PV for the record's claim and volume,
// so that the volume is the PV's to delete and not the journal's.
func (c *Controller) ownsVolume(pv *corev1.PersistentVolume, rec intent.Record) bool {
	handle := pvspec.Handle(pv)
	return pv.DeletionTimestamp == nil && handle != "" && pvspec.ProvisionedBy(pv, c.cfg.DriverName) &&
		(rec.VolumeID == "" || handle == rec.VolumeID) &&
		pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == rec.ClaimUID
}

// savedWindow is how long a saved PV may take to reach the cache before the claim is
// provisioned again (CreateVolume is idempotent, so that is safe, only wasteful).
const savedWindow = 30 * time.Second

// migrates reports whether class names the in-tree plugin migrated to the driver
// (external-provisioner's supportsMigrationFromInTreePluginName).
func (c *Controller) migrates(class *storagev1.StorageClass) bool {
	return class.Provisioner != "" && class.Provisioner == migration.InTreeName(c.cfg.DriverName)
}
