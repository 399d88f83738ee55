package groupcontroller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	groupclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumegroupsnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

// Event reasons of the group snapshot controller, as upstream records them.
const (
	reasonValidation      = "GroupSnapshotValidationError"
	reasonFinalizer       = "GroupSnapshotFinalizerError"
	reasonContentMissing  = "GroupSnapshotContentMissing"
	reasonContentMisbound = "GroupSnapshotContentMisbound"
	reasonBindFailed      = "GroupSnapshotBindFailed"
	reasonHandleSet       = "GroupSnapshotHandleSet"
	reasonStatusFailed    = "GroupSnapshotStatusUpdateFailed"
	reasonCreateContent   = "GroupSnapshotContentCreationFailed"
	reasonContentFailed   = "CreateGroupSnapshotContentFailed"
	reasonCreating        = "CreatingGroupSnapshot"
	reasonCreated         = "GroupSnapshotCreated"
	reasonReady           = "GroupSnapshotReady"
	reasonDefaultClass    = "SetDefaultGroupSnapshotClassFailed"
	reasonDeletePending   = "SnapshotDeletePending"
	reasonContentDelete   = "GroupSnapshotContentObjectDeleteError"
	reasonMemberDelete    = "SnapshotDeleteError"
	reasonMembersFailed   = "GroupSnapshotMembersFailed"
	reasonContentMismatch = "GroupSnapshotContentMismatch"
)

// errRetry asks for a retry with backoff after the problem was reported on the object.
var errRetry = errors.New("retrying")

// syncGroup brings one VolumeGroupSnapshot, its content and its members to the state their
// specs ask for. A conflict waits for the newer version's event, without backoff.
func (c *Controller) syncGroup(ctx context.Context, key string) error {
	return write.WaitForCache.Settle(ctx, c.sync(ctx, key), "volumegroupsnapshot", key)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	vgs, err := c.groups.VolumeGroupSnapshots(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	vgs = vgs.DeepCopy()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumegroupsnapshot", klog.KObj(vgs)))
	if vgs.DeletionTimestamp != nil {
		return c.deleteGroup(ctx, vgs)
	}
	src := vgs.Spec.Source
	if (src.Selector == nil) == (src.VolumeGroupSnapshotContentName == nil) {
		return c.fail(ctx, vgs, reasonValidation, "spec.source must name exactly one of selector and volumeGroupSnapshotContentName")
	}
	var content *groupv1.VolumeGroupSnapshotContent
	if src.Selector != nil {
		content, err = c.dynamicContent(ctx, vgs)
	} else {
		content, err = c.preProvisionedContent(ctx, vgs)
	}
	if content == nil || err != nil {
		return err
	}
	return c.bind(ctx, vgs, content)
}

// dynamicContent returns the group's content, created if needed. nil and no error means the
// group itself was updated (its default class) and will come back.
func (c *Controller) dynamicContent(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) (*groupv1.VolumeGroupSnapshotContent, error) {
	name := snapshotter.GroupContentName(vgs)
	if vgs.Status != nil && ptr.Deref(vgs.Status.BoundVolumeGroupSnapshotContentName, "") != "" {
		name = *vgs.Status.BoundVolumeGroupSnapshotContentName
	}
	content, err := c.content(ctx, name)
	if err != nil {
		return nil, err
	}
	if content == nil {
		if name != snapshotter.GroupContentName(vgs) {
			return nil, c.fail(ctx, vgs, reasonContentMissing, fmt.Sprintf("VolumeGroupSnapshotContent %s is missing", name))
		}
		return c.createContent(ctx, vgs)
	}
	if content.Spec.Source.GroupSnapshotHandles != nil {
		return nil, c.fail(ctx, vgs, reasonHandleSet, fmt.Sprintf("VolumeGroupSnapshotContent %s of a dynamic group snapshot must not set spec.source.groupSnapshotHandles", name))
	}
	return content, nil
}

// createContent creates the content of a dynamic group: the volumes of the claims the
// selector picks, the class (the driver's default when none is named), its secret.
func (c *Controller) createContent(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) (*groupv1.VolumeGroupSnapshotContent, error) {
	pvs, err := c.sourceVolumes(vgs)
	if err != nil {
		return nil, c.fail(ctx, vgs, reasonCreateContent, err.Error())
	}
	if vgs.Spec.VolumeGroupSnapshotClassName == nil {
		return nil, c.setDefaultClass(ctx, vgs, pvs[0].Spec.CSI.Driver)
	}
	class, err := c.class(ctx, *vgs.Spec.VolumeGroupSnapshotClassName)
	if err != nil {
		return nil, c.fail(ctx, vgs, reasonCreateContent, err.Error())
	}
	var handles []string
	for _, pv := range pvs {
		if pv.Spec.CSI.Driver != class.Driver {
			return nil, c.fail(ctx, vgs, reasonContentFailed, fmt.Sprintf("volume %s (claim %s) is of driver %s, VolumeGroupSnapshotClass %s of driver %s: a group takes the volumes of one driver",
				pv.Name, pv.Spec.ClaimRef.Name, pv.Spec.CSI.Driver, class.Name, class.Driver))
		}
		handles = append(handles, pv.Spec.CSI.VolumeHandle)
	}
	name := snapshotter.GroupContentName(vgs)
	secret, err := snapshotter.GroupSecret(class, name, vgs)
	if err != nil {
		return nil, c.fail(ctx, vgs, reasonCreateContent, err.Error())
	}
	content := &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// Born with the bound finalizer, as kubevol's snapshot contents: the sidecar takes no
			// group snapshot for a content without it, so the content is the durable record of
			// the group snapshot in flight.
			Finalizers: []string{snapshotter.FinalizerGroupContentBound},
		},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corev1.ObjectReference{
				Kind: "VolumeGroupSnapshot", APIVersion: groupv1.SchemeGroupVersion.String(),
				Namespace: vgs.Namespace, Name: vgs.Name, UID: vgs.UID, ResourceVersion: vgs.ResourceVersion,
			},
			DeletionPolicy:               class.DeletionPolicy,
			Driver:                       class.Driver,
			VolumeGroupSnapshotClassName: &class.Name,
			Source:                       groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: handles},
		},
	}
	if secret != nil {
		content.Annotations = map[string]string{snapshotter.AnnGroupDeletionSecretName: secret.Name, snapshotter.AnnGroupDeletionSecretNamespace: secret.Namespace}
	}
	out, err := c.cfg.Snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Create(ctx, content, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		out, err = c.cfg.Snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, c.fail(ctx, vgs, reasonContentFailed, fmt.Sprintf("failed to create VolumeGroupSnapshotContent %s: %v", name, err))
	}
	c.recorder.Eventf(vgs, corev1.EventTypeNormal, reasonCreating, "Waiting for a group snapshot %s/%s to be created by the CSI driver.", vgs.Namespace, vgs.Name)
	klog.FromContext(ctx).V(2).Info("Created group content", "content", name, "driver", class.Driver, "class", class.Name, "volumes", len(handles))
	return out, nil
}

// sourceVolumes returns the CSI PVs of the claims the selector picks, in claim-name order,
// each bound both ways.
func (c *Controller) sourceVolumes(vgs *groupv1.VolumeGroupSnapshot) ([]*corev1.PersistentVolume, error) {
	sel, err := metav1.LabelSelectorAsSelector(vgs.Spec.Source.Selector)
	if err != nil {
		return nil, fmt.Errorf("spec.source.selector: %w", err)
	}
	claims, err := c.claims.PersistentVolumeClaims(vgs.Namespace).List(sel)
	if err != nil {
		return nil, err
	}
	if len(claims) == 0 {
		return nil, fmt.Errorf("label selector %s for group snapshot not applied to any PVC", metav1.FormatLabelSelector(vgs.Spec.Source.Selector))
	}
	slices.SortFunc(claims, func(a, b *corev1.PersistentVolumeClaim) int { return strings.Compare(a.Name, b.Name) })
	var out []*corev1.PersistentVolume
	for _, pvc := range claims {
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			return nil, fmt.Errorf("the PVC %s is not yet bound to a PV, will not attempt to take a group snapshot", pvc.Name)
		}
		pv, err := c.volumes.Get(pvc.Spec.VolumeName)
		if err != nil {
			return nil, fmt.Errorf("volume %s of claim %s: %w", pvc.Spec.VolumeName, pvc.Name, err)
		}
		if err := snapshotter.CheckVolume(pv, pvc); err != nil {
			return nil, err
		}
		out = append(out, pv)
	}
	return out, nil
}

// setDefaultClass names the driver's one default group class in the group's spec.
func (c *Controller) setDefaultClass(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, driver string) error {
	all, err := c.classes.List(labels.Everything())
	if err != nil {
		return err
	}
	defaults := snapshotter.DefaultClasses(all, func(cl *groupv1.VolumeGroupSnapshotClass) string { return cl.Driver }, driver, snapshotter.AnnGroupDefaultClass)
	switch len(defaults) {
	case 0:
		return c.fail(ctx, vgs, reasonDefaultClass, fmt.Sprintf("cannot find default group snapshot class for driver %s: name one in spec.volumeGroupSnapshotClassName, or annotate one class of the driver with %s: \"true\"", driver, snapshotter.AnnGroupDefaultClass))
	case 1:
	default:
		return c.fail(ctx, vgs, reasonDefaultClass, fmt.Sprintf("%d default group snapshot classes were found for driver %s (%v): keep the annotation on one", len(defaults), driver, defaults))
	}
	vgs.Spec.VolumeGroupSnapshotClassName = &defaults[0]
	_, err = snapshotter.VolumeGroupSnapshots(c.cfg.Snap, write.Update).Write(ctx, vgs, vgs)
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Set the default group snapshot class", "class", defaults[0])
	}
	return err
}

func (c *Controller) class(ctx context.Context, name string) (*groupv1.VolumeGroupSnapshotClass, error) {
	class, err := controller.Get(ctx, c.classes, c.cfg.Snap.GroupsnapshotV1().VolumeGroupSnapshotClasses(), name)
	if err != nil {
		return nil, fmt.Errorf("failed to get VolumeGroupSnapshotClass %s: %w", name, err)
	}
	return class, nil
}

// content returns a group content from the cache, else from the API, or nil.
func (c *Controller) content(ctx context.Context, name string) (*groupv1.VolumeGroupSnapshotContent, error) {
	content, err := controller.Get(ctx, c.contents, c.contentClient(), name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return content, err
}

func (c *Controller) contentClient() groupclient.VolumeGroupSnapshotContentInterface {
	return c.cfg.Snap.GroupsnapshotV1().VolumeGroupSnapshotContents()
}

// contentWriter writes group contents with update, the verb upstream's role grants. A
// refusal is logged, without an event.
func (c *Controller) contentWriter() write.Writer[*groupv1.VolumeGroupSnapshotContent] {
	return snapshotter.VolumeGroupSnapshotContents(c.cfg.Snap, write.Update)
}

// preProvisionedContent binds the group to the content an administrator made for it.
func (c *Controller) preProvisionedContent(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) (*groupv1.VolumeGroupSnapshotContent, error) {
	name := *vgs.Spec.Source.VolumeGroupSnapshotContentName
	content, err := c.content(ctx, name)
	if err != nil {
		return nil, err
	}
	if content == nil {
		return nil, c.fail(ctx, vgs, reasonContentMissing, fmt.Sprintf("VolumeGroupSnapshotContent %s is missing: create it, or correct spec.source.volumeGroupSnapshotContentName", name))
	}
	ref := content.Spec.VolumeGroupSnapshotRef
	switch {
	case content.Spec.Source.GroupSnapshotHandles == nil:
		return nil, c.fail(ctx, vgs, reasonContentMismatch, fmt.Sprintf("VolumeGroupSnapshotContent %s is a dynamic content (spec.source.volumeHandles), not a pre-provisioned one (spec.source.groupSnapshotHandles)", name))
	case ref.Name != vgs.Name || ref.Namespace != vgs.Namespace || (ref.UID != "" && ref.UID != vgs.UID):
		return nil, c.fail(ctx, vgs, reasonContentMisbound, misbound(content)+": set its spec.volumeGroupSnapshotRef to this group's namespace and name, with no uid")
	}
	if ref.UID == "" {
		content = content.DeepCopy()
		content.Spec.VolumeGroupSnapshotRef.UID = vgs.UID
		if vgs.Spec.VolumeGroupSnapshotClassName != nil && content.Spec.VolumeGroupSnapshotClassName == nil {
			content.Spec.VolumeGroupSnapshotClassName = vgs.Spec.VolumeGroupSnapshotClassName
		}
		if content, err = c.contentWriter().Write(ctx, content, content, write.On(vgs)); err != nil {
			return nil, write.WarnUnlessConflict(c.recorder, vgs, reasonBindFailed, err, "Failed to bind VolumeGroupSnapshotContent %s: %v", name)
		}
		klog.FromContext(ctx).V(2).Info("Bound pre-provisioned group content", "content", name)
	}
	return content, nil
}

// bind completes a binding: the content points back and carries its finalizer, the group
// its bound finalizer; once the group snapshot is taken, its members exist; the group's
// status follows the content.
func (c *Controller) bind(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) error {
	ref := content.Spec.VolumeGroupSnapshotRef
	if ref.Name != vgs.Name || ref.Namespace != vgs.Namespace || ref.UID != vgs.UID {
		return c.fail(ctx, vgs, reasonContentMisbound, misbound(content))
	}
	var err error
	if content.DeletionTimestamp == nil && !snapshotter.HasFinalizer(content, snapshotter.FinalizerGroupContentBound) {
		if content, err = c.contentWriter().SetFinalizer(ctx, content, snapshotter.FinalizerGroupContentBound, true); err != nil {
			return err
		}
	}
	if !snapshotter.HasFinalizer(vgs, snapshotter.FinalizerGroupBound) {
		if vgs, err = snapshotter.VolumeGroupSnapshots(c.cfg.Snap, write.Update).SetFinalizer(ctx, vgs, snapshotter.FinalizerGroupBound, true); err != nil {
			return write.WarnUnlessConflict(c.recorder, vgs, reasonFinalizer, err, "Failed to add finalizer %s: %v", snapshotter.FinalizerGroupBound)
		}
	}
	// Members are made only while the group is not ready, as upstream: a member of a ready
	// group that is gone stays gone (all of them were made before the group turned ready).
	if vgs.Status == nil || !ptr.Deref(vgs.Status.ReadyToUse, false) {
		if err := c.createMembers(ctx, vgs, content); err != nil {
			// A conflict is a newer version of a member: the next sync goes on.
			return write.WarnUnlessConflict(c.recorder, vgs, reasonMembersFailed, err, "Failed to create the member snapshots: %v")
		}
	}
	return c.copyStatus(ctx, vgs, content)
}

// misbound is the error of a group whose content is bound to a different group, in
// upstream's words (GroupSnapshotContentMisbound), with the group it is bound to.
func misbound(content *groupv1.VolumeGroupSnapshotContent) string {
	ref := content.Spec.VolumeGroupSnapshotRef
	return fmt.Sprintf("VolumeGroupSnapshotContent [%s] is bound to a different group snapshot (%s/%s, uid %q)", content.Name, ref.Namespace, ref.Name, ref.UID)
}

// copyStatus writes the content's status into the group's, with upstream's events.
func (c *Controller) copyStatus(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) error {
	old := vgs.Status
	if old == nil {
		old = &groupv1.VolumeGroupSnapshotStatus{}
	}
	st := old.DeepCopy()
	st.BoundVolumeGroupSnapshotContentName = &content.Name
	ready := false
	if cs := content.Status; cs != nil {
		if st.CreationTime == nil && cs.CreationTime != nil {
			st.CreationTime = cs.CreationTime.DeepCopy()
		}
		ready = ptr.Deref(cs.ReadyToUse, false)
		st.Error = cs.Error
	}
	st.ReadyToUse = &ready
	if ready {
		st.Error = nil
	}
	if vgs.Status != nil && equality.Semantic.DeepEqual(old, st) {
		return nil
	}
	vgs.Status = st
	out, err := snapshotter.VolumeGroupSnapshots(c.cfg.Snap, write.Update).WriteStatus(ctx, vgs, vgs)
	if err != nil {
		return write.WarnUnlessConflict(c.recorder, vgs, reasonStatusFailed, err, "GroupSnapshot status update failed, %v")
	}
	if old.CreationTime == nil && st.CreationTime != nil {
		c.recorder.Eventf(out, corev1.EventTypeNormal, reasonCreated, "GroupSnapshot %s/%s was successfully created by the CSI driver.", vgs.Namespace, vgs.Name)
		c.cfg.Metrics.Created(c.subject(out, content), out.CreationTimestamp.Time)
	}
	if !ptr.Deref(old.ReadyToUse, false) && ready {
		c.recorder.Eventf(out, corev1.EventTypeNormal, reasonReady, "GroupSnapshot %s/%s is ready to use.", vgs.Namespace, vgs.Name)
		c.cfg.Metrics.Ready(c.subject(out, content), out.CreationTimestamp.Time)
		klog.FromContext(ctx).V(2).Info("Group snapshot ready", "content", content.Name)
	}
	return nil
}

// fail records a problem the user must fix: a Warning event and status.error (both skipped
// when the message is unchanged), then a retry with backoff.
func (c *Controller) fail(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot, reason, msg string) error {
	klog.FromContext(ctx).V(2).Info("Group snapshot not synced", "reason", reason, "message", msg)
	if vgs.Status != nil && vgs.Status.Error != nil && ptr.Deref(vgs.Status.Error.Message, "") == msg {
		return fmt.Errorf("%w: %s", errRetry, msg)
	}
	c.recorder.Event(vgs, corev1.EventTypeWarning, reason, msg)
	st := &groupv1.VolumeGroupSnapshotStatus{}
	if vgs.Status != nil {
		st = vgs.Status.DeepCopy()
	}
	now := metav1.Now()
	st.Error = errorStatus(now, msg)
	// Upstream turns the group not ready with every error it records in a sync, a bound and
	// ready group's included (its content missing, or bound to a different group).
	st.ReadyToUse = new(bool)
	vgs.Status = st
	if _, err := snapshotter.VolumeGroupSnapshots(c.cfg.Snap, write.Update).WriteStatus(ctx, vgs, vgs); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", errRetry, msg)
}
