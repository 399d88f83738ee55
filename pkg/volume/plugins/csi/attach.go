package csi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/pkg/volume"
)

// attachTimeout bounds one wait for the external attacher, as the kubelet's csiTimeout
// bounds waitForVolumeAttachment; the operation is then retried with backoff.
const attachTimeout = time.Minute

// AttachmentName is the VolumeAttachment the attach/detach controller creates for a CSI
// volume on a node: csi-<sha256(handle+driver+node)>.
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// deviceMounter waits for the attach, stages and unstages: the kubelet's csiAttacher.
type deviceMounter struct{ p *csiPlugin }

// WaitForAttach implements volume.Attacher: it watches the VolumeAttachment until the
// attacher marks it attached, and returns its name (the kubelet's "device path" of CSI).
func (d *deviceMounter) WaitForAttach(ctx context.Context, spec *volume.Spec, _ string, _ *v1.Pod) (string, error) {
	src, err := sourceOf(spec)
	if err != nil {
		return "", err
	}
	name := AttachmentName(src.handle, src.driver, d.p.host.NodeName())
	ctx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	// GETs with backoff, not a watch: a node may GET its VolumeAttachments but not list or
	// watch them, and the kubelet keeps no VolumeAttachment informer either. A NotFound (the
	// attach/detach controller has not created it yet) or a Forbidden (the API server's node
	// graph has not seen it yet) is waited out, and so is one being deleted: it belongs to
	// a detach (a pod that left), and the attach/detach controller creates it again for
	// this pod once it is gone (upstream fails the wait, and the mount backs off).
	delay := attachPollStart
	for {
		va, err := d.p.host.GetVolumeAttachment(ctx, name)
		switch {
		case err == nil && va.DeletionTimestamp != nil:
		case err == nil && va.Status.Attached:
			return name, nil
		case err == nil && va.Status.AttachError != nil:
			aerr := fmt.Errorf("attachdetachment error of volume attachment %s: %s", name, va.Status.AttachError.Message)
			if c := va.Status.AttachError.ErrorCode; c != nil && codes.Code(*c) == codes.ResourceExhausted {
				return "", d.p.attachLimitExceeded(ctx, src.driver, aerr)
			}
			return "", aerr
		case err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && ctx.Err() == nil:
			return "", volume.NewTransientError(fmt.Errorf("get VolumeAttachment %s: %w", name, err))
		}
		select {
		case <-ctx.Done():
			if err == nil && va.DeletionTimestamp != nil {
				return "", volume.NewTransientError(fmt.Errorf("timed out waiting for VolumeAttachment %s of volume %s to be deleted and created again", name, src.handle))
			}
			return "", volume.NewTransientError(fmt.Errorf("timed out waiting for external-attacher of %s CSI driver to attach volume %s (VolumeAttachment %s)", src.driver, src.handle, name))
		case <-time.After(delay):
		}
		delay = min(2*delay, attachPollMax)
	}
}

// The VolumeAttachment is polled from 50 ms doubling up to 1 s: an attach usually takes
// well under a second, and a node waiting for several volumes stays at one GET a second
// for each.
const (
	attachPollStart = 50 * time.Millisecond
	attachPollMax   = time.Second
)

// publishContext is the attachmentMetadata of the volume's VolumeAttachment, when the
// driver is attached; nil otherwise.
func (p *csiPlugin) publishContext(ctx context.Context, spec *volume.Spec, src source) (map[string]string, error) {
	if src.ephemeral {
		return nil, nil
	}
	attach, err := p.CanAttach(spec)
	if err != nil || !attach {
		return nil, err
	}
	name := AttachmentName(src.handle, src.driver, p.host.NodeName())
	va, err := p.host.GetVolumeAttachment(ctx, name)
	if err != nil {
		return nil, volume.NewTransientError(fmt.Errorf("get VolumeAttachment %s: %w", name, err))
	}
	switch {
	case va.DeletionTimestamp != nil:
		return nil, volume.NewTransientError(fmt.Errorf("VolumeAttachment %s is being deleted", name))
	case !va.Status.Attached:
		return nil, volume.NewTransientError(fmt.Errorf("VolumeAttachment %s is not attached", name))
	}
	return va.Status.AttachmentMetadata, nil
}

// DeviceMountPath implements volume.DeviceMounter.
func (d *deviceMounter) DeviceMountPath(spec *volume.Spec) (string, error) {
	src, err := sourceOf(spec)
	if err != nil {
		return "", err
	}
	return d.p.stagingPath(spec, src), nil
}

// MountDevice implements volume.DeviceMounter: NodeStageVolume when the driver has
// STAGE_UNSTAGE_VOLUME. vol_data.json goes beside the staging path first, so
// UnmountDevice finds the driver even after a crash.
func (d *deviceMounter) MountDevice(ctx context.Context, spec *volume.Spec, _ string, path string, args volume.MounterArgs) error {
	src, err := sourceOf(spec)
	if err != nil {
		return err
	}
	node, caps, err := d.p.nodeClient(ctx, src.driver)
	if err != nil {
		return err
	}
	if !caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		return nil // upstream: "NodeStageVolume not supported", nothing to stage
	}
	meta := d.p.stagingMetaDir(path)
	// A staging path that is already a mount point with our metadata beside it was staged
	// before a restart: the stage is not repeated. Reconstruction marks every device
	// uncertain, and this is how the agent avoids a second NodeStage for it. A staged block
	// volume has no such mark, so its (idempotent) stage is repeated.
	if data, err := readVolData(meta); err == nil && !src.block && data.VolumeHandle == src.handle && data.DriverName == src.driver {
		if mnt, err := d.p.host.Mounter().IsLikelyNotMountPoint(path); err == nil && !mnt {
			klog.FromContext(ctx).V(2).Info("Volume already staged", "volumeID", src.handle, "path", path)
			return nil
		}
	}
	pctx, err := d.p.publishContext(ctx, spec, src)
	if err != nil {
		return err
	}
	secrets, err := d.p.secrets(ctx, src.stageSecret)
	if err != nil {
		return err
	}
	group, err := d.p.mountGroup(ctx, src, caps, args)
	if err != nil {
		return err
	}
	data := volData{DriverName: src.driver, VolumeHandle: src.handle, SELinuxMountContext: args.SELinuxLabel}
	if src.block {
		// Upstream's block data file also names the PV, for reconstruction.
		data.SpecVolumeID, data.NodeName = spec.Name(), d.p.host.NodeName()
	}
	if err := writeVolData(meta, data); err != nil {
		return err
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return err
	}
	_, err = node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: src.handle, PublishContext: pctx, StagingTargetPath: path,
		VolumeCapability: src.capability(group, args.SELinuxLabel, caps), Secrets: secrets, VolumeContext: src.attributes,
	})
	if err != nil {
		if csiclient.MayBeInProgress(err) {
			return volume.NewUncertainError(err)
		}
		// Final: nothing is staged; leave no directory behind.
		_ = d.p.removeStagingDir(path)
		return err
	}
	return nil
}

// UnmountDevice implements volume.DeviceUnmounter: NodeUnstageVolume, then the staging
// directory and its vol_data.json are removed.
func (d *deviceMounter) UnmountDevice(ctx context.Context, path string) error {
	data, err := readVolData(d.p.stagingMetaDir(path))
	if errors.Is(err, os.ErrNotExist) {
		// Never staged (the driver has no STAGE_UNSTAGE_VOLUME) or already cleaned up.
		return d.p.removeStagingDir(path)
	}
	if err != nil {
		return err
	}
	node, caps, err := d.p.nodeClient(ctx, data.DriverName)
	if err != nil {
		return err
	}
	if caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		if _, err := node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: data.VolumeHandle, StagingTargetPath: path}); err != nil {
			return err
		}
	}
	return d.p.removeStagingDir(path)
}

// removeStagingDir removes what MountDevice created: the staging directory and its metadata,
// and for a block volume its volumeDevices/<pv> directory.
func (p *csiPlugin) removeStagingDir(path string) error {
	meta := p.stagingMetaDir(path)
	paths := []string{path, filepath.Join(meta, volDataFile), meta}
	if meta != filepath.Dir(path) {
		pvDir := filepath.Dir(meta)
		paths = append(paths, filepath.Join(pvDir, "dev"), pvDir)
	}
	return removeAll(paths...)
}

// removeAll removes each of paths, in order, each a file or an empty directory; a path
// that is already gone is fine.
func removeAll(paths ...string) error {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// AllocatableRefresher is implemented by Drivers that can read a driver's NodeGetInfo
// again and update the CSINode's allocatable count (pkg/csidrivers).
type AllocatableRefresher interface {
	RefreshAllocatable(ctx context.Context, driver string) error
}

// attachLimitExceeded handles an attach that failed with ResourceExhausted, as the kubelet's
// VerifyExhaustedResource: when the CSIDriver makes the allocatable count mutable
// (nodeAllocatableUpdatePeriodSeconds), the count is read from the driver again at once and
// the error says the node is out of attachments, so the pod is rejected; otherwise it is an
// ordinary attach error, retried.
func (p *csiPlugin) attachLimitExceeded(ctx context.Context, driver string, err error) error {
	drv, derr := p.csiDriver(ctx, driver)
	if derr != nil || drv == nil || drv.Spec.NodeAllocatableUpdatePeriodSeconds == nil || *drv.Spec.NodeAllocatableUpdatePeriodSeconds <= 0 {
		return err
	}
	if r, ok := p.drivers.(AllocatableRefresher); ok {
		if rerr := r.RefreshAllocatable(ctx, driver); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Cannot refresh the CSI driver's allocatable count", "driver", driver)
		}
	}
	return volume.NewAttachLimitExceededError(err)
}
