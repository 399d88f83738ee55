package snapshotcontroller

import (
	"context"
	"errors"
	"fmt"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// Event reasons of the snapshot-controller, as upstream records them.
const (
	reasonValidation       = "SnapshotValidationError"
	reasonPVCSourceMissing = "SnapshotPVCSourceMissing"
	reasonPVCFinalizer     = "ErrorPVCFinalizer"
	reasonFinalizer        = "SnapshotFinalizerError"
	reasonDeletePending    = "SnapshotDeletePending"
	reasonContentDelete    = "SnapshotContentObjectDeleteError"
	reasonContentMissing   = "SnapshotContentMissing"
	reasonMisbound         = "SnapshotMisbound"
	reasonBindFailed       = "SnapshotBindFailed"
	reasonContentMismatch  = "SnapshotContentMismatch"
	reasonContentMisbound  = "SnapshotContentMisbound"
	reasonStatusFailed     = "SnapshotStatusUpdateFailed"
	reasonCreateContent    = "SnapshotContentCreationFailed"
	reasonCreating         = "CreatingSnapshot"
	reasonCreated          = "SnapshotCreated"
	reasonReady            = "SnapshotReady"
	reasonGetClass         = "GetSnapshotClassFailed"
	reasonDefaultClass     = "SetDefaultSnapshotClassFailed"
)

// errRetry asks for a retry with backoff after the problem was reported on the object.
var errRetry = errors.New("retrying")

// syncSnapshot brings one VolumeSnapshot, its content and its source claim to the state
// their specs ask for. A conflict waits for the newer version's event, without backoff.
func (c *Controller) syncSnapshot(ctx context.Context, key string) error {
	return write.WaitForCache.Settle(ctx, c.sync(ctx, key), "volumesnapshot", key)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	vs, err := c.snapshots.VolumeSnapshots(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // a content never goes away just because its snapshot did
	}
	if err != nil {
		return err
	}
	vs = vs.DeepCopy()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumesnapshot", klog.KObj(vs)))
	if vs.DeletionTimestamp != nil {
		return c.deleteSnapshot(ctx, vs)
	}
	if vs, err = c.addFinalizers(ctx, vs, snapshotter.FinalizerSnapshotAsSource); err != nil {
		return err
	}
	src := vs.Spec.Source
	switch {
	case src.PersistentVolumeClaimName != nil && src.VolumeSnapshotContentName == nil:
		return c.syncDynamic(ctx, vs)
	case src.VolumeSnapshotContentName != nil && src.PersistentVolumeClaimName == nil:
		return c.syncPreProvisioned(ctx, vs)
	}
	return c.fail(ctx, vs, reasonValidation, "spec.source must name exactly one of persistentVolumeClaimName and volumeSnapshotContentName")
}

// syncDynamic takes a snapshot of a claim: default class, source protection, the content,
// then the binding.
func (c *Controller) syncDynamic(ctx context.Context, vs *snapv1.VolumeSnapshot) error {
	contentName := snapshotter.ContentName(vs)
	if vs.Status != nil && ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "") != "" {
		contentName = *vs.Status.BoundVolumeSnapshotContentName
	}
	if contentName == snapshotter.ContentName(vs) && snapshotter.GroupOwner(vs) != "" {
		// A member of a group snapshot: its content comes from the group, which writes the
		// binding into the status; never a snapshot of its own.
		klog.FromContext(ctx).V(4).Info("Waiting for the group snapshot to bind its member", "group", snapshotter.GroupOwner(vs))
		return nil
	}
	content, err := c.content(ctx, contentName)
	if err != nil {
		return err
	}
	if content == nil {
		if contentName != snapshotter.ContentName(vs) {
			return c.fail(ctx, vs, reasonContentMissing, fmt.Sprintf("VolumeSnapshotContent %s is missing", contentName))
		}
		if content, err = c.createContent(ctx, vs); content == nil || err != nil {
			return err
		}
	}
	return c.bind(ctx, vs, content)
}

// createContent creates the content of a dynamic snapshot. It returns nil and no error
// when the snapshot itself was updated (its default class) and will come back.
func (c *Controller) createContent(ctx context.Context, vs *snapv1.VolumeSnapshot) (*snapv1.VolumeSnapshotContent, error) {
	claimName := *vs.Spec.Source.PersistentVolumeClaimName
	pvc, pv, err := c.sourceVolume(vs.Namespace, claimName)
	if err != nil {
		return nil, c.fail(ctx, vs, reasonPVCSourceMissing, err.Error())
	}
	if vs.Spec.VolumeSnapshotClassName == nil {
		return nil, c.setDefaultClass(ctx, vs, pv.Spec.CSI.Driver)
	}
	class, err := c.class(ctx, *vs.Spec.VolumeSnapshotClassName)
	if err != nil {
		return nil, c.fail(ctx, vs, reasonGetClass, err.Error())
	}
	if class.Driver != pv.Spec.CSI.Driver {
		return nil, c.fail(ctx, vs, reasonGetClass, fmt.Sprintf("VolumeSnapshotClass %s is for driver %s, but claim %s is a volume of %s: choose a class of %s",
			class.Name, class.Driver, claimName, pv.Spec.CSI.Driver, pv.Spec.CSI.Driver))
	}
	if pvc.DeletionTimestamp != nil {
		return nil, c.fail(ctx, vs, reasonPVCFinalizer, fmt.Sprintf("cannot take a snapshot of claim %s: it is being deleted", claimName))
	}
	if err := c.protectClaim(ctx, pvc); err != nil {
		return nil, c.fail(ctx, vs, reasonPVCFinalizer, fmt.Sprintf("cannot protect claim %s while it is the source of a snapshot: %v", claimName, err))
	}
	name := snapshotter.ContentName(vs)
	secret, err := snapshotter.SnapshotSecret(class, name, vs)
	if err != nil {
		return nil, c.fail(ctx, vs, reasonCreateContent, err.Error())
	}
	content := &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// Born with the bound finalizer (upstream adds it right after the create): the
			// sidecar creates no backend snapshot for a content without it, so from the first
			// CreateSnapshot on, the content cannot disappear before the sidecar has seen it
			// go. The content is this role's durable record of the snapshot in flight.
			Finalizers: []string{snapshotter.FinalizerContentBound},
		},
		Spec: snapv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{
				Kind: "VolumeSnapshot", APIVersion: snapv1.SchemeGroupVersion.String(),
				Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID, ResourceVersion: vs.ResourceVersion,
			},
			DeletionPolicy:          class.DeletionPolicy,
			Driver:                  class.Driver,
			VolumeSnapshotClassName: &class.Name,
			Source:                  snapv1.VolumeSnapshotContentSource{VolumeHandle: &pv.Spec.CSI.VolumeHandle},
		},
	}
	if c.cfg.PreventVolumeModeConversion {
		mode := corev1.PersistentVolumeFilesystem
		if pv.Spec.VolumeMode != nil {
			mode = *pv.Spec.VolumeMode
		}
		content.Spec.SourceVolumeMode = &mode
	}
	if secret != nil {
		content.Annotations = map[string]string{snapshotter.AnnDeletionSecretName: secret.Name, snapshotter.AnnDeletionSecretNamespace: secret.Namespace}
	}
	if node, err := c.managedBy(ctx, pv); err != nil {
		return nil, err
	} else if node != "" {
		content.Labels = map[string]string{snapshotter.LabelManagedBy: node}
	}
	out, err := c.cfg.Snap.SnapshotV1().VolumeSnapshotContents().Create(ctx, content, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		out, err = c.cfg.Snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		// c.fail records the event; the line names the refused create.
		_ = controller.WriteFailed(ctx, nil, vs, "create", "volumesnapshotcontents", err)
		return nil, c.fail(ctx, vs, reasonCreateContent, fmt.Sprintf("failed to create VolumeSnapshotContent %s: %v", name, err))
	}
	c.recorder.Eventf(vs, corev1.EventTypeNormal, reasonCreating, "Waiting for a snapshot %s/%s to be created by the CSI driver.", vs.Namespace, vs.Name)
	klog.FromContext(ctx).V(2).Info("Created content", "content", name, "driver", class.Driver, "class", class.Name)
	return out, nil
}

// sourceVolume returns the bound claim and its CSI PV, or an error saying what is missing.
func (c *Controller) sourceVolume(ns, name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, error) {
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		return nil, nil, fmt.Errorf("source claim %s/%s: %w", ns, name, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, nil, fmt.Errorf("source claim %s is not bound yet", name)
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if err != nil {
		return nil, nil, fmt.Errorf("volume %s of source claim %s: %w", pvc.Spec.VolumeName, name, err)
	}
	if err := snapshotter.CheckVolume(pv, pvc); err != nil {
		return nil, nil, err
	}
	return pvc, pv, nil
}

// setDefaultClass names the driver's default class in the snapshot's spec. Exactly one
// class of the driver may carry the default annotation, with the value "true".
func (c *Controller) setDefaultClass(ctx context.Context, vs *snapv1.VolumeSnapshot, driver string) error {
	all, err := c.classes.List(labels.Everything())
	if err != nil {
		return err
	}
	defaults := snapshotter.DefaultClasses(all, func(cl *snapv1.VolumeSnapshotClass) string { return cl.Driver }, driver, snapshotter.AnnDefaultClass)
	switch len(defaults) {
	case 0:
		return c.fail(ctx, vs, reasonDefaultClass, fmt.Sprintf("cannot find default snapshot class for driver %s: name a class in spec.volumeSnapshotClassName, or mark one class of the driver with %s: \"true\"", driver, snapshotter.AnnDefaultClass))
	case 1:
	default:
		return c.fail(ctx, vs, reasonDefaultClass, fmt.Sprintf("%d default snapshot classes were found for driver %s (%v): keep %s: \"true\" on one of them, or name a class", len(defaults), driver, defaults, snapshotter.AnnDefaultClass))
	}
	vs.Spec.VolumeSnapshotClassName = &defaults[0]
	w := snapshotter.VolumeSnapshots(c.cfg.Snap, write.Update)
	w.Recorder = c.recorder
	_, err = w.Write(ctx, vs, vs)
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Set the default snapshot class", "class", defaults[0])
	}
	return err
}

// class returns a VolumeSnapshotClass from the cache, else from the API.
func (c *Controller) class(ctx context.Context, name string) (*snapv1.VolumeSnapshotClass, error) {
	class, err := controller.Get(ctx, c.classes, c.cfg.Snap.SnapshotV1().VolumeSnapshotClasses(), name)
	if err != nil {
		return nil, fmt.Errorf("failed to get VolumeSnapshotClass %s: %w", name, err)
	}
	return class, nil
}

// content returns a content from the cache, else from the API (a content this controller
// created a moment ago may not be cached yet), or nil when it does not exist.
func (c *Controller) content(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error) {
	content, err := controller.Get(ctx, c.contents, c.cfg.Snap.SnapshotV1().VolumeSnapshotContents(), name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return content, err
}

// contentWriter writes contents with update, the verb upstream's role grants, each refusal
// reported on the content written.
func (c *Controller) contentWriter() write.Writer[*snapv1.VolumeSnapshotContent] {
	w := snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Update)
	w.Recorder = c.recorder
	return w
}

// syncPreProvisioned binds a snapshot to the content an administrator made for it.
func (c *Controller) syncPreProvisioned(ctx context.Context, vs *snapv1.VolumeSnapshot) error {
	name := *vs.Spec.Source.VolumeSnapshotContentName
	content, err := c.content(ctx, name)
	if err != nil {
		return err
	}
	if content == nil {
		return c.fail(ctx, vs, reasonContentMissing, fmt.Sprintf("VolumeSnapshotContent %s is missing: create it, or correct spec.source.volumeSnapshotContentName", name))
	}
	ref := content.Spec.VolumeSnapshotRef
	switch {
	case content.Spec.Source.SnapshotHandle == nil:
		return c.fail(ctx, vs, reasonContentMismatch, fmt.Sprintf("VolumeSnapshotContent %s is a dynamic content (spec.source.volumeHandle), not a pre-provisioned one (spec.source.snapshotHandle)", name))
	case ref.Name != vs.Name || ref.Namespace != vs.Namespace || (ref.UID != "" && ref.UID != vs.UID):
		return c.fail(ctx, vs, reasonContentMisbound, fmt.Sprintf("VolumeSnapshotContent %s is bound to VolumeSnapshot %s/%s (uid %q), not to this one: set its spec.volumeSnapshotRef to this snapshot's namespace and name", name, ref.Namespace, ref.Name, ref.UID))
	}
	if ref.UID == "" {
		content = content.DeepCopy()
		content.Spec.VolumeSnapshotRef.UID = vs.UID
		if vs.Spec.VolumeSnapshotClassName != nil {
			content.Spec.VolumeSnapshotClassName = vs.Spec.VolumeSnapshotClassName
		}
		// The bind's own event is recorded here, on the snapshot, so the writer logs only.
		if content, err = snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Update).Write(ctx, content, content, write.On(vs)); err != nil {
			return write.WarnUnlessConflict(c.recorder, vs, reasonBindFailed, err, "Failed to bind VolumeSnapshotContent %s: %v", name)
		}
		klog.FromContext(ctx).V(2).Info("Bound pre-provisioned content", "content", name)
	}
	return c.bind(ctx, vs, content)
}

// bind completes a binding: the content points back, carries its finalizer, and the
// snapshot's finalizers and status follow the content.
func (c *Controller) bind(ctx context.Context, vs *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) error {
	ref := content.Spec.VolumeSnapshotRef
	if ref.Name != vs.Name || ref.Namespace != vs.Namespace || ref.UID != vs.UID {
		return c.fail(ctx, vs, reasonMisbound, fmt.Sprintf("VolumeSnapshotContent %s is bound to another VolumeSnapshot (%s/%s, uid %s)", content.Name, ref.Namespace, ref.Name, ref.UID))
	}
	if content.DeletionTimestamp == nil && !snapshotter.HasFinalizer(content, snapshotter.FinalizerContentBound) {
		var err error
		if content, err = c.contentWriter().SetFinalizer(ctx, content, snapshotter.FinalizerContentBound, true); err != nil {
			return err
		}
	}
	var err error
	if content.Spec.DeletionPolicy == snapv1.VolumeSnapshotContentDelete {
		if vs, err = c.addFinalizers(ctx, vs, snapshotter.FinalizerSnapshotBound); err != nil {
			return err
		}
	}
	if vs, err = c.copyStatus(ctx, vs, content); err != nil {
		return err
	}
	if src := vs.Spec.Source.PersistentVolumeClaimName; src != nil && ptr.Deref(vs.Status.ReadyToUse, false) {
		return c.releaseClaim(ctx, vs.Namespace, *src)
	}
	return nil
}

// copyStatus writes the content's status into the snapshot's, with upstream's events.
func (c *Controller) copyStatus(ctx context.Context, vs *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) (*snapv1.VolumeSnapshot, error) {
	old := vs.Status
	if old == nil {
		old = &snapv1.VolumeSnapshotStatus{}
	}
	st := old.DeepCopy()
	st.BoundVolumeSnapshotContentName = &content.Name
	if st.ReadyToUse == nil {
		st.ReadyToUse = new(bool)
	}
	if cs := content.Status; cs != nil {
		if cs.CreationTime != nil {
			t := metav1.Unix(0, *cs.CreationTime)
			st.CreationTime = &t
		}
		if cs.ReadyToUse != nil {
			st.ReadyToUse = cs.ReadyToUse
		}
		if cs.RestoreSize != nil && (st.RestoreSize == nil || st.RestoreSize.IsZero()) {
			st.RestoreSize = sizeQuantity(*cs.RestoreSize)
		}
		st.Error = cs.Error
	}
	if ptr.Deref(st.ReadyToUse, false) {
		st.Error = nil
	}
	if statusEqual(old, st) && vs.Status != nil {
		return vs, nil
	}
	driver := content.Spec.Driver
	vs.Status = st
	out, err := snapshotter.VolumeSnapshots(c.cfg.Snap, write.Update).WriteStatus(ctx, vs, vs)
	if err != nil {
		return nil, write.WarnUnlessConflict(c.recorder, vs, reasonStatusFailed, err, "Snapshot status update failed: %v")
	}
	if old.CreationTime == nil && st.CreationTime != nil {
		c.recorder.Eventf(out, corev1.EventTypeNormal, reasonCreated, "Snapshot %s/%s was successfully created by the CSI driver.", vs.Namespace, vs.Name)
		c.cfg.Metrics.Created(subject(out, driver), vs.CreationTimestamp.Time)
	}
	if !ptr.Deref(old.ReadyToUse, false) && ptr.Deref(st.ReadyToUse, false) {
		c.recorder.Eventf(out, corev1.EventTypeNormal, reasonReady, "Snapshot %s/%s is ready to use.", vs.Namespace, vs.Name)
		c.cfg.Metrics.Ready(subject(out, driver), vs.CreationTimestamp.Time)
		klog.FromContext(ctx).V(2).Info("Snapshot ready", "content", content.Name)
	}
	return out, nil
}

// addFinalizers adds the finalizers vs lacks and returns the updated snapshot.
func (c *Controller) addFinalizers(ctx context.Context, vs *snapv1.VolumeSnapshot, fs ...string) (*snapv1.VolumeSnapshot, error) {
	// The role's own events are recorded here, so the writer logs refusals only.
	snapshots := snapshotter.VolumeSnapshots(c.cfg.Snap, write.Update)
	out, err := snapshots.Mutate(ctx, vs, func(cur *snapv1.VolumeSnapshot) bool { return write.SetFinalizers(cur, true, fs...) })
	return out, write.WarnUnlessConflict(c.recorder, vs, reasonFinalizer, err, "Failed to add finalizers %v: %v", fs)
}

// fail records a problem the user must fix: a Warning event and status.error (both skipped
// when the message is unchanged), then a retry with backoff.
func (c *Controller) fail(ctx context.Context, vs *snapv1.VolumeSnapshot, reason, msg string) error {
	klog.FromContext(ctx).V(2).Info("Snapshot not synced", "reason", reason, "message", msg)
	if vs.Status != nil && vs.Status.Error != nil && ptr.Deref(vs.Status.Error.Message, "") == msg {
		return fmt.Errorf("%w: %s", errRetry, msg)
	}
	c.recorder.Event(vs, corev1.EventTypeWarning, reason, msg)
	st := &snapv1.VolumeSnapshotStatus{}
	if vs.Status != nil {
		st = vs.Status.DeepCopy()
	}
	now := metav1.Now()
	st.Error = &snapv1.VolumeSnapshotError{Time: &now, Message: &msg}
	if st.BoundVolumeSnapshotContentName == nil || !ptr.Deref(st.ReadyToUse, false) {
		st.ReadyToUse = new(bool)
	}
	vs.Status = st
	snapshots := snapshotter.VolumeSnapshots(c.cfg.Snap, write.Update)
	snapshots.Recorder = c.recorder
	if _, err := snapshots.WriteStatus(ctx, vs, vs); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", errRetry, msg)
}

// protectClaim adds the source-protection finalizer to the snapshot's source claim.
func (c *Controller) protectClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if snapshotter.HasFinalizer(pvc, snapshotter.FinalizerPVCAsSource) {
		return nil
	}
	// snapshot-controller's role grants update on claims, not patch.
	_, err := write.ClaimFinalizers(c.cfg.Client).SetFinalizer(ctx, pvc, snapshotter.FinalizerPVCAsSource, true)
	return err
}

// releaseClaim removes the claim's source-protection finalizer once no snapshot that is
// neither ready nor being deleted names it (upstream's rule).
func (c *Controller) releaseClaim(ctx context.Context, ns, name string) error {
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !snapshotter.HasFinalizer(pvc, snapshotter.FinalizerPVCAsSource) {
		return err
	}
	all, err := c.snapshots.VolumeSnapshots(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, vs := range all {
		if ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "") == name && vs.DeletionTimestamp == nil &&
			(vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false)) {
			return nil // that snapshot's own sync releases the claim once it is ready
		}
	}
	_, err = write.ClaimFinalizers(c.cfg.Client).SetFinalizer(ctx, pvc, snapshotter.FinalizerPVCAsSource, false)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Released source claim", "pvc", klog.KRef(ns, name))
	}
	return err
}
