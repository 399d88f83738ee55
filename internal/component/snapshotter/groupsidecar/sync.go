package groupsidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/component/snapshotter/creation"
	"github.com/kubevol/kubevol/internal/component/snapshotter/csisnapshotter"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// Event reasons of the group csi-snapshotter, as upstream records them.
const (
	reasonCreateFailed = "GroupSnapshotCreationFailed"
	reasonCheckFailed  = "GroupSnapshotContentCheckandUpdateFailed"
	reasonDeleteError  = "GroupSnapshotDeleteError"
)

// Parameter keys added with --extra-create-metadata.
const (
	paramGroupName      = "csi.storage.k8s.io/volumegroupsnapshot/name"
	paramGroupNamespace = "csi.storage.k8s.io/volumegroupsnapshot/namespace"
	paramContentName    = "csi.storage.k8s.io/volumegroupsnapshotcontent/name"
)

var errNotReady = errors.New("group snapshot not ready yet")

// syncContent brings one group content of this driver to its backend group snapshot. A
// conflict is retried soon without growing the backoff.
func (c *Controller) syncContent(ctx context.Context, name string) error {
	return write.RetrySoon.Settle(ctx, c.sync(ctx, name), "volumegroupsnapshotcontent", name)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	content, err := c.contents.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if content.Spec.Driver != c.cfg.DriverName {
		return nil
	}
	content = content.DeepCopy()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumegroupsnapshotcontent", klog.KObj(content)))
	deleting := content.DeletionTimestamp != nil
	notReady := content.Status == nil || !ptr.Deref(content.Status.ReadyToUse, false)
	switch {
	case len(content.Spec.Source.VolumeHandles) > 0:
		if content.Annotations[snapshotter.AnnGroupBeingCreated] == "yes" || (notReady && !deleting) {
			if content, err = c.create(ctx, content); err != nil {
				if deleting && !errors.Is(err, errNotReady) && content.Annotations[snapshotter.AnnGroupBeingCreated] != "yes" {
					break // a final error: nothing exists in the backend, release below
				}
				return err
			}
		}
	case content.Spec.Source.GroupSnapshotHandles != nil && notReady && !deleting:
		return c.check(ctx, content)
	}
	if deleting && releasable(content) {
		return c.release(ctx, content)
	}
	return nil
}

// releasable is upstream's rule: a pre-provisioned content never bound, or one whose group
// is being deleted and whose create is not in flight.
func releasable(content *groupv1.VolumeGroupSnapshotContent) bool {
	if content.Spec.Source.GroupSnapshotHandles != nil && content.Spec.VolumeGroupSnapshotRef.UID == "" {
		return true
	}
	return content.Annotations[snapshotter.AnnGroupBeingDeleted] == "yes" && content.Annotations[snapshotter.AnnGroupBeingCreated] != "yes"
}

// create calls CreateVolumeGroupSnapshot for a dynamic group content and records the answer.
func (c *Controller) create(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) (*groupv1.VolumeGroupSnapshotContent, error) {
	return creation.Create[*groupv1.VolumeGroupSnapshotContent, *csi.CreateVolumeGroupSnapshotRequest]{
		Writer: c.writer(), Recorder: c.recorder, Op: "CreateVolumeGroupSnapshot",
		BoundFinalizer: snapshotter.FinalizerGroupContentBound, BeingCreated: snapshotter.AnnGroupBeingCreated, Reason: reasonCreateFailed,
		NotReady: errNotReady,
		Handle: func(content *groupv1.VolumeGroupSnapshotContent) string {
			if content.Status == nil {
				return ""
			}
			return ptr.Deref(content.Status.VolumeGroupSnapshotHandle, "")
		},
		Ready:        contentFilter.Ready,
		ErrorMessage: errorMessage,
		Request:      c.createRequest,
		Call:         c.createGroup,
		Failure: func(req *csi.CreateVolumeGroupSnapshotRequest, err error) string {
			return fmt.Sprintf("Failed to create group snapshot: failed to take group snapshot of the volumes %v: %v", req.SourceVolumeIds, err)
		},
	}.Run(ctx, content)
}

// createGroup calls CreateVolumeGroupSnapshot and returns the status it gives the content.
func (c *Controller) createGroup(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (map[string]any, bool, error) {
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	rsp, err := c.cfg.CSI.Group.CreateVolumeGroupSnapshot(cctx, req)
	cancel()
	if err != nil {
		return nil, false, err
	}
	g := rsp.GetGroupSnapshot()
	klog.FromContext(ctx).V(2).Info("CreateVolumeGroupSnapshot succeeded", "groupSnapshotHandle", g.GetGroupSnapshotId(), "ready", g.GetReadyToUse(), "members", len(g.GetSnapshots()))
	return groupStatus(g), g.GetReadyToUse(), nil
}

// groupStatus is the status a CSI group snapshot gives its content.
func groupStatus(g *csi.VolumeGroupSnapshot) map[string]any {
	created := time.Now()
	if g.GetCreationTime() != nil && g.GetCreationTime().AsTime().UnixNano() > 0 {
		created = g.GetCreationTime().AsTime()
	}
	var infos []groupv1.VolumeSnapshotInfo
	for _, s := range g.GetSnapshots() {
		ready := s.GetReadyToUse()
		info := groupv1.VolumeSnapshotInfo{VolumeHandle: s.GetSourceVolumeId(), SnapshotHandle: s.GetSnapshotId(), ReadyToUse: &ready}
		if s.GetCreationTime() != nil {
			t := s.GetCreationTime().AsTime().UnixNano()
			info.CreationTime = &t
		}
		if n := s.GetSizeBytes(); n > 0 {
			info.RestoreSize = &n
		}
		infos = append(infos, info)
	}
	return map[string]any{
		"volumeGroupSnapshotHandle": g.GetGroupSnapshotId(),
		"readyToUse":                g.GetReadyToUse(),
		"creationTime":              metav1.NewTime(created),
		"volumeSnapshotInfoList":    infos,
		"error":                     nil,
	}
}

// createRequest builds the request: name from the group's UID, parameters from the class,
// secrets from the content's annotations.
func (c *Controller) createRequest(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) (*csi.CreateVolumeGroupSnapshotRequest, error) {
	if content.Spec.VolumeGroupSnapshotClassName == nil {
		return nil, fmt.Errorf("failed to take group snapshot %s without a group snapshot class: set spec.volumeGroupSnapshotClassName", content.Name)
	}
	class, err := c.class(ctx, *content.Spec.VolumeGroupSnapshotClassName)
	if err != nil {
		return nil, err
	}
	params, err := snapshotter.GroupParameters(class)
	if err != nil {
		return nil, err
	}
	ref := content.Spec.VolumeGroupSnapshotRef
	if ref.UID == "" {
		return nil, fmt.Errorf("cannot create group snapshot: VolumeGroupSnapshotContent %s is not bound to a VolumeGroupSnapshot", content.Name)
	}
	if c.cfg.ExtraCreateMetadata {
		params[paramGroupName], params[paramGroupNamespace], params[paramContentName] = ref.Name, ref.Namespace, content.Name
	}
	secretData, err := csiclient.FetchSecrets(ctx, c.cfg.Client, snapshotter.GroupDeletionSecret(content))
	if err != nil {
		return nil, fmt.Errorf("group snapshotter secret: %w", err)
	}
	return &csi.CreateVolumeGroupSnapshotRequest{
		Name:            csisnapshotter.SnapshotName(c.cfg.NamePrefix, c.cfg.UUIDLength, ref.UID),
		SourceVolumeIds: content.Spec.Source.VolumeHandles,
		Parameters:      params,
		Secrets:         secretData,
	}, nil
}

func (c *Controller) class(ctx context.Context, name string) (*groupv1.VolumeGroupSnapshotClass, error) {
	class, err := controller.Get(ctx, c.classes, c.cfg.Snap.GroupsnapshotV1().VolumeGroupSnapshotClasses(), name)
	if err != nil {
		return nil, fmt.Errorf("failed to get VolumeGroupSnapshotClass %s: %w", name, err)
	}
	return class, nil
}

// check fills the status of a pre-provisioned group content from GetVolumeGroupSnapshot.
// kubevol also records the members the driver reports, so the snapshot-controller can make
// member snapshots of a pre-provisioned group too.
func (c *Controller) check(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) error {
	h := content.Spec.Source.GroupSnapshotHandles
	var secret *corev1.SecretReference
	if n := content.Spec.VolumeGroupSnapshotClassName; n != nil {
		class, err := c.class(ctx, *n)
		if err != nil {
			return c.checkFailed(ctx, content, err.Error())
		}
		if secret, err = snapshotter.GroupGetSecret(class, content.Name); err != nil {
			return c.checkFailed(ctx, content, err.Error())
		}
	}
	secretData, err := csiclient.FetchSecrets(ctx, c.cfg.Client, secret)
	if err != nil {
		return c.checkFailed(ctx, content, err.Error())
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	rsp, err := c.cfg.CSI.Group.GetVolumeGroupSnapshot(cctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: h.VolumeGroupSnapshotHandle, SnapshotIds: h.VolumeSnapshotHandles, Secrets: secretData})
	cancel()
	if err != nil {
		return c.checkFailed(ctx, content, fmt.Sprintf("failed to get group snapshot %s: %v", h.VolumeGroupSnapshotHandle, err))
	}
	g := rsp.GetGroupSnapshot()
	if g.GetGroupSnapshotId() == "" {
		g.GroupSnapshotId = h.VolumeGroupSnapshotHandle
	}
	if _, err := c.patchStatus(ctx, content, groupStatus(g)); err != nil {
		return err
	}
	if !g.GetReadyToUse() {
		return errNotReady
	}
	return nil
}

func (c *Controller) checkFailed(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent, msg string) error {
	c.recorder.Event(content, corev1.EventTypeWarning, reasonCheckFailed, msg)
	if _, err := c.setError(ctx, content, msg); err != nil {
		return err
	}
	return errors.New(msg)
}

// release deletes the backend group snapshot of a released Delete-policy content and removes
// the content's finalizer. A Retain content keeps its backend group snapshot.
func (c *Controller) release(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) error {
	if !snapshotter.HasFinalizer(content, snapshotter.FinalizerGroupContentBound) {
		return nil
	}
	handle, ids := "", []string(nil)
	if st := content.Status; st != nil {
		handle = ptr.Deref(st.VolumeGroupSnapshotHandle, "")
		for _, i := range st.VolumeSnapshotInfoList {
			ids = append(ids, i.SnapshotHandle)
		}
	}
	if h := content.Spec.Source.GroupSnapshotHandles; h != nil {
		if handle == "" {
			handle = h.VolumeGroupSnapshotHandle
		}
		if len(ids) == 0 {
			ids = h.VolumeSnapshotHandles
		}
	}
	if content.Spec.DeletionPolicy == snapv1.VolumeSnapshotContentDelete && handle != "" {
		secretData, err := csiclient.FetchSecrets(ctx, c.cfg.Client, snapshotter.GroupDeletionSecret(content))
		if err != nil {
			c.recorder.Eventf(content, corev1.EventTypeWarning, reasonDeleteError, "Failed to get snapshot credentials: %v", err)
			return err
		}
		cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
		_, err = c.cfg.CSI.Group.DeleteVolumeGroupSnapshot(cctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: handle, SnapshotIds: ids, Secrets: secretData})
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			c.recorder.Eventf(content, corev1.EventTypeWarning, reasonDeleteError, "Failed to delete group snapshot %s: %v", handle, err)
			return err
		}
		klog.FromContext(ctx).V(2).Info("Deleted backend group snapshot", "groupSnapshotHandle", handle)
	}
	_, err := c.writer().SetFinalizer(ctx, content, snapshotter.FinalizerGroupContentBound, false)
	return write.IgnoreNotFound(err)
}

// writer writes group contents with the verbs upstream's role grants (update, and patch on
// the status). A refusal is logged, without an event.
func (c *Controller) writer() write.Writer[*groupv1.VolumeGroupSnapshotContent] {
	return snapshotter.VolumeGroupSnapshotContents(c.cfg.Snap, write.Update)
}

func (c *Controller) setError(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent, msg string) (*groupv1.VolumeGroupSnapshotContent, error) {
	return contentwrite.SetError(ctx, c.writer(), content, errorMessage(content), msg)
}

func errorMessage(content *groupv1.VolumeGroupSnapshotContent) *string {
	if content.Status == nil || content.Status.Error == nil {
		return nil
	}
	return new(ptr.Deref(content.Status.Error.Message, ""))
}

func (c *Controller) patchStatus(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent, st map[string]any) (*groupv1.VolumeGroupSnapshotContent, error) {
	return contentwrite.PatchStatus(ctx, c.writer(), content, st)
}
