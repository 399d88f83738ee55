package csisnapshotter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/contentwrite"
	"github.com/kubevol/kubevol/internal/component/snapshotter/creation"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// Event reasons of the csi-snapshotter, as upstream records them.
const (
	reasonCreateFailed = "SnapshotCreationFailed"
	reasonCheckFailed  = "SnapshotContentCheckandUpdateFailed"
	reasonDeleteError  = "SnapshotDeleteError"
)

// Parameter keys added with --extra-create-metadata.
const (
	paramSnapshotName      = "csi.storage.k8s.io/volumesnapshot/name"
	paramSnapshotNamespace = "csi.storage.k8s.io/volumesnapshot/namespace"
	paramContentName       = "csi.storage.k8s.io/volumesnapshotcontent/name"
)

// errNotReady requeues a content whose snapshot the driver has not finished (with backoff).
var errNotReady = errors.New("snapshot not ready yet")

func errNoSnapshots(driver string) error {
	return fmt.Errorf("CSI driver %s does not support snapshots (no CREATE_DELETE_SNAPSHOT capability)", driver)
}

// syncContent brings one content of this driver to its backend snapshot: create or check
// it, then, when the content is released, delete it. A conflict is retried soon without
// growing the backoff.
func (c *Controller) syncContent(ctx context.Context, name string) error {
	return write.RetrySoon.Settle(ctx, c.sync(ctx, name), "volumesnapshotcontent", name)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	content, err := c.contents.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.mine(content) {
		return nil
	}
	content = content.DeepCopy()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumesnapshotcontent", klog.KObj(content)))
	deleting := content.DeletionTimestamp != nil
	if content.Spec.Source.VolumeHandle != nil {
		// A create may be in flight (being-created) or still to do: finish it first, also
		// when the content is being deleted, so its snapshot is known and can be deleted.
		creating := content.Annotations[snapshotter.AnnBeingCreated] == "yes"
		notReady := content.Status == nil || !ptr.Deref(content.Status.ReadyToUse, false)
		switch {
		case content.Annotations[snapshotter.AnnGroupSnapshotHandle] != "":
		case creating || (notReady && !deleting):
			if content, err = c.create(ctx, content); err != nil {
				if deleting && !errors.Is(err, errNotReady) && content != nil && content.Annotations[snapshotter.AnnBeingCreated] != "yes" {
					break // a final error: nothing was created, release it below
				}
				return err
			}
		}
	} else if !deleting && (content.Status == nil || !ptr.Deref(content.Status.ReadyToUse, false)) {
		return c.check(ctx, content)
	}
	if deleting && releasable(content) {
		return c.release(ctx, content)
	}
	return nil
}

// mine reports whether the content belongs to this sidecar's driver (and its class, if it
// names one that exists, too).
func (c *Controller) mine(content *snapv1.VolumeSnapshotContent) bool {
	if content.Spec.Driver != c.cfg.DriverName {
		return false
	}
	if n := content.Spec.VolumeSnapshotClassName; n != nil {
		if class, err := c.classes.Get(*n); err == nil && class.Driver != c.cfg.DriverName {
			return false
		}
	}
	return true
}

// releasable is upstream's rule for acting on a deleted content: a pre-provisioned content
// never bound, or one whose snapshot is being deleted and whose create is not in flight.
func releasable(content *snapv1.VolumeSnapshotContent) bool {
	if content.Spec.Source.SnapshotHandle != nil && content.Spec.VolumeSnapshotRef.UID == "" {
		return true
	}
	return content.Annotations[snapshotter.AnnBeingDeleted] == "yes" && content.Annotations[snapshotter.AnnBeingCreated] != "yes"
}

// create calls CreateSnapshot for a dynamic content and records the answer. It returns the
// content as last written.
func (c *Controller) create(ctx context.Context, content *snapv1.VolumeSnapshotContent) (*snapv1.VolumeSnapshotContent, error) {
	return creation.Create[*snapv1.VolumeSnapshotContent, *csi.CreateSnapshotRequest]{
		Writer: c.writer(), Recorder: c.recorder, Op: "CreateSnapshot",
		BoundFinalizer: snapshotter.FinalizerContentBound, BeingCreated: snapshotter.AnnBeingCreated, Reason: reasonCreateFailed,
		NotReady: errNotReady,
		Handle: func(content *snapv1.VolumeSnapshotContent) string {
			if content.Status == nil {
				return ""
			}
			return ptr.Deref(content.Status.SnapshotHandle, "")
		},
		Ready:        contentFilter.Ready,
		ErrorMessage: errorMessage,
		Request:      c.createRequest,
		// CreateSnapshot is serialized per source volume.
		Lock: func(ctx context.Context, req *csi.CreateSnapshotRequest) (func(), error) {
			return c.volumes.lock(ctx, req.SourceVolumeId)
		},
		Call: c.createSnapshot,
		Failure: func(req *csi.CreateSnapshotRequest, err error) string {
			return fmt.Sprintf("Failed to create snapshot: failed to take snapshot of the volume %s: %v", req.SourceVolumeId, err)
		},
	}.Run(ctx, content)
}

// createSnapshot calls CreateSnapshot and returns the status it gives the content.
func (c *Controller) createSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (map[string]any, bool, error) {
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	rsp, err := c.cfg.CSI.Controller.CreateSnapshot(cctx, req)
	cancel()
	if err != nil {
		return nil, false, err
	}
	snap := rsp.GetSnapshot()
	klog.FromContext(ctx).V(2).Info("CreateSnapshot succeeded", "snapshotHandle", snap.GetSnapshotId(), "ready", snap.GetReadyToUse())
	st := map[string]any{
		"snapshotHandle": snap.GetSnapshotId(),
		"readyToUse":     snap.GetReadyToUse(),
		"creationTime":   creationTime(snap.GetCreationTime().AsTime(), snap.GetCreationTime() != nil),
		"error":          nil,
	}
	if snap.GetSizeBytes() > 0 {
		st["restoreSize"] = snap.GetSizeBytes()
	}
	return st, snap.GetReadyToUse(), nil
}

// createRequest builds the CreateSnapshotRequest: name from the snapshot's UID, parameters
// from the class, secrets from the content's annotations.
func (c *Controller) createRequest(ctx context.Context, content *snapv1.VolumeSnapshotContent) (*csi.CreateSnapshotRequest, error) {
	if content.Spec.VolumeSnapshotClassName == nil {
		return nil, fmt.Errorf("failed to take snapshot %s without a snapshot class: set spec.volumeSnapshotClassName", content.Name)
	}
	class, err := controller.Get(ctx, c.classes, c.cfg.Snap.SnapshotV1().VolumeSnapshotClasses(), *content.Spec.VolumeSnapshotClassName)
	if err != nil {
		return nil, fmt.Errorf("failed to get VolumeSnapshotClass %s: %w", *content.Spec.VolumeSnapshotClassName, err)
	}
	params, err := snapshotter.Parameters(class)
	if err != nil {
		return nil, err
	}
	ref := content.Spec.VolumeSnapshotRef
	if ref.UID == "" {
		return nil, fmt.Errorf("VolumeSnapshotContent %s is not bound to a VolumeSnapshot (spec.volumeSnapshotRef.uid is empty)", content.Name)
	}
	if c.cfg.ExtraCreateMetadata {
		params[paramSnapshotName], params[paramSnapshotNamespace], params[paramContentName] = ref.Name, ref.Namespace, content.Name
	}
	secretData, err := csiclient.FetchSecrets(ctx, c.cfg.Client, snapshotter.DeletionSecret(content))
	if err != nil {
		return nil, fmt.Errorf("snapshotter secret: %w", err)
	}
	return &csi.CreateSnapshotRequest{
		Name:           SnapshotName(c.cfg.NamePrefix, c.cfg.UUIDLength, ref.UID),
		SourceVolumeId: *content.Spec.Source.VolumeHandle,
		Parameters:     params,
		Secrets:        secretData,
	}, nil
}

// SnapshotName is the CreateSnapshot name of the VolumeSnapshot with uid: <prefix>-<uid>,
// or with uuidLength > 0 the UID without dashes cut to that length (upstream's rule).
func SnapshotName(prefix string, uuidLength int, uid types.UID) string {
	id := string(uid)
	if uuidLength > 0 {
		id = strings.ReplaceAll(id, "-", "")
		id = id[:min(uuidLength, len(id))]
	}
	return prefix + "-" + id
}

// check fills the status of a pre-provisioned content from ListSnapshots, or marks it ready
// at once when the driver cannot list snapshots, as upstream.
func (c *Controller) check(ctx context.Context, content *snapv1.VolumeSnapshotContent) error {
	handle := *content.Spec.Source.SnapshotHandle
	st := map[string]any{"snapshotHandle": handle, "readyToUse": true, "error": nil}
	if !c.lists {
		st["creationTime"] = time.Now().UnixNano()
		_, err := c.patchStatus(ctx, content, st)
		return err
	}
	var secret *corev1.SecretReference
	if n := content.Spec.VolumeSnapshotClassName; n != nil {
		if class, err := c.classes.Get(*n); err == nil {
			if secret, err = snapshotter.ListSecret(class, content.Name); err != nil {
				return c.checkFailed(ctx, content, err.Error())
			}
		}
	}
	secretData, err := csiclient.FetchSecrets(ctx, c.cfg.Client, secret)
	if err != nil {
		return c.checkFailed(ctx, content, err.Error())
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	rsp, err := c.cfg.CSI.Controller.ListSnapshots(cctx, &csi.ListSnapshotsRequest{SnapshotId: handle, Secrets: secretData})
	cancel()
	if err != nil {
		return c.checkFailed(ctx, content, fmt.Sprintf("failed to list snapshot %s: %v", handle, err))
	}
	if len(rsp.GetEntries()) == 0 {
		return c.checkFailed(ctx, content, fmt.Sprintf("can not find snapshot for snapshotID %s: check spec.source.snapshotHandle", handle))
	}
	snap := rsp.GetEntries()[0].GetSnapshot()
	st["readyToUse"] = snap.GetReadyToUse()
	st["creationTime"] = creationTime(snap.GetCreationTime().AsTime(), snap.GetCreationTime() != nil)
	if snap.GetSizeBytes() > 0 {
		st["restoreSize"] = snap.GetSizeBytes()
	}
	if _, err := c.patchStatus(ctx, content, st); err != nil {
		return err
	}
	if !snap.GetReadyToUse() {
		return errNotReady
	}
	return nil
}

func (c *Controller) checkFailed(ctx context.Context, content *snapv1.VolumeSnapshotContent, msg string) error {
	c.recorder.Event(content, corev1.EventTypeWarning, reasonCheckFailed, msg)
	if _, err := c.setError(ctx, content, msg); err != nil {
		return err
	}
	return errors.New(msg)
}

// release deletes the backend snapshot of a released Delete-policy content and removes the
// content's finalizer. A Retain content, or a group member, keeps its backend snapshot.
func (c *Controller) release(ctx context.Context, content *snapv1.VolumeSnapshotContent) error {
	if !snapshotter.HasFinalizer(content, snapshotter.FinalizerContentBound) {
		return nil
	}
	handle := ""
	if content.Status != nil {
		handle = ptr.Deref(content.Status.SnapshotHandle, "")
	}
	if handle == "" {
		handle = ptr.Deref(content.Spec.Source.SnapshotHandle, "")
	}
	if content.Spec.DeletionPolicy == snapv1.VolumeSnapshotContentDelete && handle != "" && content.Annotations[snapshotter.AnnGroupSnapshotHandle] == "" {
		secretData, err := csiclient.FetchSecrets(ctx, c.cfg.Client, snapshotter.DeletionSecret(content))
		if err != nil {
			c.recorder.Eventf(content, corev1.EventTypeWarning, reasonDeleteError, "Failed to delete snapshot: snapshotter secret: %v", err)
			return err
		}
		cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
		_, err = c.cfg.CSI.Controller.DeleteSnapshot(cctx, &csi.DeleteSnapshotRequest{SnapshotId: handle, Secrets: secretData})
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			c.recorder.Eventf(content, corev1.EventTypeWarning, reasonDeleteError, "Failed to delete snapshot %s: %v", handle, err)
			return err
		}
		klog.FromContext(ctx).V(2).Info("Deleted backend snapshot", "snapshotHandle", handle)
	}
	_, err := c.writer().SetFinalizer(ctx, content, snapshotter.FinalizerContentBound, false)
	return write.IgnoreNotFound(err)
}

// writer writes contents with the verbs upstream's role grants (update, and patch on the
// status), each refusal reported on the content written.
func (c *Controller) writer() write.Writer[*snapv1.VolumeSnapshotContent] {
	w := snapshotter.VolumeSnapshotContents(c.cfg.Snap, write.Update)
	w.Recorder = c.recorder
	return w
}

// setError records msg in the content's status.error, with readyToUse false.
func (c *Controller) setError(ctx context.Context, content *snapv1.VolumeSnapshotContent, msg string) (*snapv1.VolumeSnapshotContent, error) {
	return contentwrite.SetError(ctx, c.writer(), content, errorMessage(content), msg)
}

func errorMessage(content *snapv1.VolumeSnapshotContent) *string {
	if content.Status == nil || content.Status.Error == nil {
		return nil
	}
	return new(ptr.Deref(content.Status.Error.Message, ""))
}

func (c *Controller) patchStatus(ctx context.Context, content *snapv1.VolumeSnapshotContent, st map[string]any) (*snapv1.VolumeSnapshotContent, error) {
	return contentwrite.PatchStatus(ctx, c.writer(), content, st)
}

// creationTime is the driver's time in nanoseconds, or now when it gave none.
func creationTime(t time.Time, set bool) int64 {
	if !set || t.UnixNano() <= 0 {
		return time.Now().UnixNano()
	}
	return t.UnixNano()
}
