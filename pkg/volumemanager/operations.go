package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volumemanager/internal/executor"
)

// Operation names are upstream's operation_name label values.
const (
	opMount         = "volume_mount"
	opUnmount       = "volume_unmount"
	opUnmountDevice = "unmount_device"
)

// opNames are the operation names, the prefixes of their errors and the reason of the
// event of a failed mount, of a filesystem or a block volume, as upstream.
type opNames struct {
	mount, unmount, unmountDevice string
	// Error prefixes: the pod SetUp (or map), its teardown, the node affinity check, the
	// wait for the attach, the device's staging, the ReadWriteOncePod refusal, and the
	// expansion the mount finishes.
	setUp, tearDown, nodeAffinity, waitForAttach, mountDevice, inUse, expandDuringMount string
	// failedEvent is the reason of the Warning event of a failed mount or map.
	failedEvent string
}

var (
	fsOps = opNames{opMount, opUnmount, opUnmountDevice,
		"MountVolume.SetUp failed", "UnmountVolume.TearDown failed", "MountVolume.NodeAffinity check failed",
		"MountVolume.WaitForAttach failed", "MountVolume.MountDevice failed", "MountVolume.SetUp failed",
		"MountVolume.Setup failed while expanding volume", "FailedMount"}
	blockOps = opNames{"map_volume", "unmap_volume", "unmap_device",
		"MapVolume.MapPodDevice failed", "UnmapVolume.UnmapPodDevice failed", "MapVolume.NodeAffinity check failed",
		"MapVolume.WaitForAttach failed", "MapVolume.SetUpDevice failed", "MapVolume.SetUpDevice failed",
		"MapVolume.MarkVolumeAsMounted failed while expanding volume", "FailedMapVolume"}
)

// volumeError is the kubelet's text of a failed volume operation (upstream generateVolumeMsg
// with errSuffix): `<what> for volume "<spec>" : <err>`, a space before the colon. spec is
// the volume spec's name, as upstream: the PV's for a claim, else the pod's volume's.
func volumeError(what, spec string, err error) error {
	return fmt.Errorf("%s for volume %q : %w", what, spec, err)
}

// nodeAffinityError marks a failed node affinity check: upstream posts it as FailedMount
// even for a block volume, whose other failures are FailedMapVolume.
type nodeAffinityError struct{ err error }

func (e nodeAffinityError) Error() string { return e.err.Error() }
func (e nodeAffinityError) Unwrap() error { return e.err }

// failedMountReason is the reason of the Warning event of a mount (or map) that failed with err.
func failedMountReason(ops opNames, err error) string {
	if errors.As(err, new(nodeAffinityError)) {
		return "FailedMount"
	}
	return ops.failedEvent
}

func opsOf(block bool) opNames {
	if block {
		return blockOps
	}
	return fsOps
}

// start runs op and turns the executor's refusals into a requeue delay: executor.ErrPending needs
// none (the running operation enqueues the pod when done), a backoff needs its remainder.
func (m *Manager) start(ctx context.Context, op executor.Operation) time.Duration {
	err := m.exec.Run(ctx, op)
	var be *executor.BackoffError
	switch {
	case err == nil, errors.Is(err, executor.ErrPending):
		return 0
	case errors.As(err, &be):
		return max(time.Until(be.Until), time.Millisecond)
	}
	klog.FromContext(ctx).Error(err, "Cannot start volume operation", "operation", op.Name, "volume", op.Key.Volume)
	return executor.InitialBackoff
}

// startMount sets a volume up for a pod: wait for attach, mount the device, then SetUp
// (upstream: GenerateMountVolumeFunc), or for a block volume map it (GenerateMapVolumeFunc).
func (m *Manager) startMount(ctx context.Context, pod *v1.Pod, dv DesiredVolume) time.Duration {
	uid := pod.UID
	key := executor.OpKey{Volume: dv.Name, Pod: uid}
	if dv.DeviceMountable {
		key.Pod = ""
	}
	seq := m.remountSeqOf(uid)
	prev, hadPrev := m.asw.PodVolume(uid, dv.Name)
	var refreshAt time.Time
	var mountPath string
	outer := dv.OuterNames[0]
	block := dv.Spec.Block()
	ops := opsOf(block)
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "volume", outer, "volumeID", dv.Name)
	return m.start(ctx, executor.Operation{
		Key: key, Pod: uid, Name: ops.mount, PluginName: dv.PluginName, Migrated: dv.Spec.Migrated,
		Run: func(ctx context.Context) error {
			if err := m.checkBeforeMount(ctx, pod, dv); err != nil {
				return err
			}
			if err := m.checkSELinuxMount(dv); err != nil {
				// The volume was mounted with another context since the pod was synced.
				return volume.NewTransientError(err)
			}
			if _, err := m.ensureDevice(ctx, pod, dv); err != nil {
				return err
			}
			mounter, err := m.newMounter(dv, pod)
			if err != nil {
				return err
			}
			mountPath = mounter.Path()
			args := mounterArgs(pod)
			args.SELinuxLabel = dv.SELinuxLabel
			if err := mounter.SetUp(ctx, args); err != nil {
				return volumeError(ops.setUp, dv.Spec.Name(), err)
			}
			if err := m.expandDuringMount(ctx, pod, dv); err != nil {
				return err
			}
			if r, ok := mounter.(volume.Refresher); ok {
				if d := r.RefreshAfter(); d > 0 {
					refreshAt = time.Now().Add(d)
				}
			}
			return nil
		},
		Done: func(err error) {
			mv := MountedVolume{Name: dv.Name, PluginName: dv.PluginName, PodUID: uid, SpecName: dv.Spec.Name(),
				MountPath: mountPath, Block: block, Migrated: dv.Spec.Migrated}
			switch {
			case err == nil:
				mv.RefreshAt = refreshAt
				// The sequence counts changes of any of the pod's objects: only a volume
				// that refreshes can have gone stale (a CSI volume without requiresRepublish
				// must not be published again because a ConfigMap of its pod changed).
				m.asw.completeMount(mv, dv.RequiresRemount && m.remountSeqOf(uid) != seq, dv.SELinuxLabel)
				m.records.setOpError(uid, dv.Name, "")
				if !hadPrev {
					m.metrics.observeOverallMount(dv.PluginName, time.Since(dv.RequestTime))
				}
				logger.V(4).Info("Volume mounted")
				if !refreshAt.IsZero() {
					m.podQueue.AddAfter(uid, time.Until(refreshAt))
				}
			case errors.Is(err, errNotReportedInUse):
				// MarkVolumesReportedInUse requeues the pod once the node status lists the
				// volume; until then it is retried at the kubelet reconciler's period, not
				// in a loop that spins while the status update is on its way.
				logger.V(2).Info("Volume not mounted yet", "reason", err.Error())
				m.podQueue.AddAfter(uid, notReportedRetry)
				return
			case volume.IsTransient(err):
				logger.V(2).Info("Volume not mounted yet", "reason", err.Error())
			case volume.IsAttachLimitExceeded(err):
				m.rejectForAttachLimit(ctx, pod, dv.Name, outer, err)
			default:
				m.records.setOpError(uid, dv.Name, err.Error())
				m.recorder.Event(pod, v1.EventTypeWarning, failedMountReason(ops, err), err.Error())
				logger.Error(err, "Volume mount failed")
				if volume.IsUncertain(err) {
					mv.State = VolumeMountUncertain
					m.asw.setMountState(mv)
				} else if hadPrev && prev.State == VolumeMountUncertain && !prev.Reconstructed {
					// A final error after an uncertain one: nothing is mounted (upstream rule).
					mv.State = VolumeNotMounted
					m.asw.setMountState(mv)
				}
			}
			m.podQueue.Add(uid)
		},
	})
}

// newMounter returns the plugin's mounter of dv for pod, or its block mapper.
func (m *Manager) newMounter(dv DesiredVolume, pod *v1.Pod) (volume.Mounter, error) {
	if dv.Spec.Block() {
		bp, err := m.plugins.FindBlockByName(dv.PluginName)
		if err != nil {
			return nil, err
		}
		return bp.NewBlockMapper(dv.Spec, pod)
	}
	plugin, err := m.plugins.FindByName(dv.PluginName)
	if err != nil {
		return nil, err
	}
	return plugin.NewMounter(dv.Spec, pod)
}

// newUnmounter returns the unmounter of a pod's volume directory, or its block unmapper.
func (m *Manager) newUnmounter(pluginName, specName string, uid types.UID, block bool) (volume.Unmounter, error) {
	if block {
		bp, err := m.plugins.FindBlockByName(pluginName)
		if err != nil {
			return nil, err
		}
		return bp.NewBlockUnmapper(specName, uid)
	}
	plugin, err := m.plugins.FindByName(pluginName)
	if err != nil {
		return nil, err
	}
	return plugin.NewUnmounter(specName, uid)
}

// errNotReportedInUse is why an attachable volume waits before its mount: the attach/detach
// controller must see it in node.status.volumesInUse first.
var errNotReportedInUse = errors.New("is not yet reported in node.status.volumesInUse")

// notReportedRetry is how soon a pod waiting for that report is synced again if the
// report's own requeue does not come first (upstream's reconciler loop period).
const notReportedRetry = 100 * time.Millisecond

// ensureDevice records the volume as attached and, for device-mountable plugins, mounts
// its device. Non-attachable volumes are "attached" with no device, as upstream.
func (m *Manager) ensureDevice(ctx context.Context, pod *v1.Pod, dv DesiredVolume) (string, error) {
	av, ok := m.asw.Volume(dv.Name)
	if !ok {
		av = AttachedVolume{Name: dv.Name, PluginName: dv.PluginName, Spec: dv.Spec, Attachable: dv.Attachable, DeviceMountable: dv.DeviceMountable}
	}
	if dv.Attachable {
		// The attach/detach controller must see the volume in node.status.volumesInUse
		// before we use it, or it could detach it under us (upstream #27836).
		if !m.dsw.ReportedInUse(dv.Name) {
			m.volumesInUseChanged()
			return "", volume.NewTransientError(fmt.Errorf("volume %s %w", dv.Name, errNotReportedInUse))
		}
		ap, err := m.plugins.FindAttachable(dv.Spec)
		if err != nil || ap == nil {
			return "", fmt.Errorf("find attachable plugin: %v", err)
		}
		attacher, err := ap.NewAttacher()
		if err != nil {
			return "", err
		}
		av.DevicePath, err = attacher.WaitForAttach(ctx, dv.Spec, av.DevicePath, pod)
		if err != nil {
			return "", volumeError(opsOf(dv.Spec.Block()).waitForAttach, dv.Spec.Name(), err)
		}
	}
	m.asw.markAttached(av)
	if !dv.DeviceMountable || av.DeviceState == DeviceMounted {
		return av.DevicePath, nil
	}
	dm, err := m.plugins.FindDeviceMountable(dv.Spec)
	if err != nil || dm == nil {
		return "", fmt.Errorf("find device-mountable plugin: %v", err)
	}
	mounter, err := dm.NewDeviceMounter()
	if err != nil {
		return "", err
	}
	path, err := mounter.DeviceMountPath(dv.Spec)
	if err != nil {
		return "", err
	}
	args := mounterArgs(pod)
	args.SELinuxLabel = dv.SELinuxLabel
	if err := mounter.MountDevice(ctx, dv.Spec, av.DevicePath, path, args); err != nil {
		switch {
		case volume.IsUncertain(err):
			m.asw.setDeviceState(dv.Name, DeviceMountUncertain, path)
		case volume.IsTransient(err):
		case av.DeviceState == DeviceMountUncertain:
			m.asw.setDeviceState(dv.Name, DeviceNotMounted, "")
		}
		return "", volumeError(opsOf(dv.Spec.Block()).mountDevice, dv.Spec.Name(), err)
	}
	m.asw.setDeviceState(dv.Name, DeviceMounted, path)
	m.asw.noteSELinuxContext(dv.Name, dv.SELinuxLabel)
	return av.DevicePath, nil
}

// startUnmount tears one pod's volume down: subPath binds first, then the plugin's
// TearDown. A failure leaves the volume uncertain, so it is retried and never forgotten.
func (m *Manager) startUnmount(ctx context.Context, mv MountedVolume) time.Duration {
	logger := klog.FromContext(ctx).WithValues("podUID", mv.PodUID, "volumeID", mv.Name)
	ops := opsOf(mv.Block)
	return m.start(ctx, executor.Operation{
		Key: executor.OpKey{Volume: mv.Name, Pod: mv.PodUID}, Name: ops.unmount, PluginName: mv.PluginName, Migrated: mv.Migrated,
		Run: func(ctx context.Context) error {
			if err := m.cleanSubpaths(mv.PodUID, mv.SpecName); err != nil {
				return err
			}
			u, err := m.newUnmounter(mv.PluginName, mv.SpecName, mv.PodUID, mv.Block)
			if err != nil {
				return err
			}
			if err := u.TearDown(ctx); err != nil {
				return volumeError(ops.tearDown, mv.SpecName, err)
			}
			return nil
		},
		Done: func(err error) {
			if err != nil {
				logger.Error(err, "Volume unmount failed")
				mv.State = VolumeMountUncertain
				m.asw.setMountState(mv)
			} else {
				logger.V(4).Info("Volume unmounted")
				mv.State = VolumeNotMounted
				m.asw.setMountState(mv)
				m.records.setOpError(mv.PodUID, mv.Name, "")
				m.deviceQueue.Add(mv.Name)
			}
			m.podQueue.Add(mv.PodUID)
			for _, uid := range m.dsw.VolumeUsers(mv.Name) {
				m.podQueue.Add(uid) // a shared volume waiting for this unmount
			}
		},
	})
}

// startUnmountDevice unmounts the global mount of a volume no pod uses (CSI NodeUnstage).
func (m *Manager) startUnmountDevice(ctx context.Context, av AttachedVolume) time.Duration {
	logger := klog.FromContext(ctx).WithValues("volumeID", av.Name)
	return m.start(ctx, executor.Operation{
		Key: executor.OpKey{Volume: av.Name}, Name: opsOf(av.Spec.Block()).unmountDevice, PluginName: av.PluginName,
		Migrated: av.Spec != nil && av.Spec.Migrated,
		Run: func(ctx context.Context) error {
			dm, err := m.plugins.FindDeviceMountable(av.Spec)
			if err != nil || dm == nil {
				return fmt.Errorf("find device-mountable plugin: %v", err)
			}
			if refs, err := dm.DeviceMountRefs(av.DeviceMountPath); err != nil {
				return err
			} else if len(refs) > 0 {
				return fmt.Errorf("the device mount path %q is still mounted by other references %v", av.DeviceMountPath, refs)
			}
			u, err := dm.NewDeviceUnmounter()
			if err != nil {
				return err
			}
			return u.UnmountDevice(ctx, av.DeviceMountPath)
		},
		Done: func(err error) {
			if err != nil {
				logger.Error(err, "Device unmount failed")
				m.asw.setDeviceState(av.Name, DeviceMountUncertain, "")
			} else {
				m.asw.setDeviceState(av.Name, DeviceNotMounted, "")
				m.asw.remove(av.Name)
				if av.Attachable {
					// The node status drops it now, so that the volume can be detached.
					m.volumesInUseChanged()
				}
			}
			m.deviceQueue.Add(av.Name)
			// A pod that wanted the volume while its device was being unmounted was refused
			// (the operation was pending) and waits for this one, as for a pod unmount.
			for _, uid := range m.dsw.VolumeUsers(av.Name) {
				m.podQueue.Add(uid)
			}
		},
	})
}

// mounterArgs carries the pod's fsGroup and, when every container runs as the same user,
// that user (upstream FsUserFrom), e.g. for service account token ownership.
func mounterArgs(pod *v1.Pod) volume.MounterArgs {
	var args volume.MounterArgs
	if sc := pod.Spec.SecurityContext; sc != nil {
		args.FsGroup = sc.FSGroup
		args.FSGroupChangePolicy = sc.FSGroupChangePolicy
	}
	var user *int64
	for i, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		u := (*int64)(nil)
		if pod.Spec.SecurityContext != nil {
			u = pod.Spec.SecurityContext.RunAsUser
		}
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			u = c.SecurityContext.RunAsUser
		}
		if u == nil || (i > 0 && (user == nil || *user != *u)) {
			return args
		}
		user = u
	}
	args.FsUser = user
	return args
}

// rejectForAttachLimit rejects a pod whose volume cannot be attached because the node has
// reached the driver's attachment limit (the kubelet's VolumeAttachLimitExceededError): a
// Warning event VolumeAttachmentLimitExceeded and, through a PodRejecter observer, phase
// Failed. The pod then wants no volumes and what it has is torn down.
func (m *Manager) rejectForAttachLimit(ctx context.Context, pod *v1.Pod, name v1.UniqueVolumeName, outer string, err error) {
	msg := fmt.Sprintf("Node has reached its volume attachment limit, rejecting pod. unattached volumes=[%s]: %v", outer, err)
	m.records.setOpError(pod.UID, name, msg)
	m.recorder.Event(pod, v1.EventTypeWarning, VolumeAttachmentLimitExceededReason, msg)
	klog.FromContext(ctx).Info("Pod rejected", "pod", klog.KObj(pod), "reason", VolumeAttachmentLimitExceededReason, "message", msg)
	if r, ok := m.cfg.Observer.(PodRejecter); ok {
		r.RejectPod(pod, VolumeAttachmentLimitExceededReason, msg)
	}
}
