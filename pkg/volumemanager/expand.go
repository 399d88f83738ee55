package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volumemanager/internal/executor"
)

// opExpand is upstream's operation name of ExpandInUseVolume.
const opExpand = "volume_fs_resize"

// expansionTarget is the size the node must expand dv to, if it must: the PV grew beyond the
// claim's status.capacity, the controller side handed over to the node, and the node has
// not already expanded the volume to that size.
func expansionTarget(dv DesiredVolume, av AttachedVolume) (resource.Quantity, bool) {
	pvc := dv.Claim
	if pvc == nil || dv.Spec.PersistentVolume == nil {
		return resource.Quantity{}, false
	}
	want, ok := dv.Spec.PersistentVolume.Spec.Capacity[v1.ResourceStorage]
	if !ok {
		return resource.Quantity{}, false
	}
	have := pvc.Status.Capacity[v1.ResourceStorage]
	if want.Cmp(have) <= 0 || (av.ExpandedTo != nil && want.Cmp(*av.ExpandedTo) <= 0) {
		return resource.Quantity{}, false
	}
	return want, nodeTurn(&pvc.Status)
}

// nodeTurn reports whether the controller side has handed the expansion over to the node:
// the resize status says so (KEP-1790), or, from a resizer that sets no status, the
// FileSystemResizePending condition does. The PV grows before the claim's status is written,
// so the PV's size alone would start the node too early.
func nodeTurn(s *v1.PersistentVolumeClaimStatus) bool {
	switch s.AllocatedResourceStatuses[v1.ResourceStorage] {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
		return true
	case "":
		for _, c := range s.Conditions {
			if c.Type == v1.PersistentVolumeClaimFileSystemResizePending && c.Status == v1.ConditionTrue {
				return true
			}
		}
	}
	// The controller is still at work, or the node found the size infeasible: wait for the
	// claim to change.
	return false
}

// Texts of the node expansion, as upstream: an expansion of a mounted volume
// (ExpandInUseVolume) fails with its own prefix and a VolumeResizeFailed event on the pod,
// one run by the mount (expandVolumeDuringMount) fails the mount with the mount's prefix
// (opNames.expandDuringMount) and its FailedMount event; both succeed with the node
// expander's FileSystemResizeSuccessful event on the pod and the claim.
const (
	expandInUseFailed = "NodeExpandVolume.NodeExpandVolume failed"
	expandSucceeded   = "MountVolume.NodeExpandVolume succeeded"
	// expandFailedEvent is upstream's VolumeResizeFailed.
	expandFailedEvent = "VolumeResizeFailed"
)

// inUseExpansionError is a NodeExpandVolume refused with FAILED_PRECONDITION: the volume
// cannot grow while it is in use here. It is not retried while the volume stays mounted
// and does not fail a mount (upstream MarkForInUseExpansionError).
type inUseExpansionError struct{ err error }

func (e inUseExpansionError) Error() string { return e.err.Error() }
func (e inUseExpansionError) Unwrap() error { return e.err }

// startExpand runs NodeExpandVolume for a mounted volume whose PV grew (upstream
// ExpandInUseVolume).
func (m *Manager) startExpand(ctx context.Context, pod *v1.Pod, dv DesiredVolume, size resource.Quantity) time.Duration {
	outer := dv.OuterNames[0]
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "volume", outer, "volumeID", dv.Name, "size", size.String())
	return m.start(ctx, executor.Operation{
		Key: executor.OpKey{Volume: dv.Name}, Pod: pod.UID, Name: opExpand, PluginName: dv.PluginName, Migrated: dv.Spec.Migrated,
		Run: func(ctx context.Context) error {
			err := m.nodeExpand(ctx, pod, dv, size)
			if err == nil || errors.Is(err, errNotNodeTurn) {
				return err
			}
			return volumeError(expandInUseFailed, dv.Spec.Name(), err)
		},
		Done: func(err error) {
			switch {
			case errors.Is(err, errNotNodeTurn):
				logger.V(2).Info("Volume expansion not pending on the node yet")
			case err != nil:
				logger.Error(err, "Volume expansion failed")
				m.recorder.Event(pod, v1.EventTypeWarning, expandFailedEvent, err.Error())
			default:
				logger.V(2).Info("Volume expanded on the node")
			}
			m.podQueue.Add(pod.UID)
		},
	})
}

// expandDuringMount finishes, within the mount of dv, an expansion the controller did before
// the volume was mounted (upstream expandVolumeDuringMount). Its failure fails the mount,
// which stays uncertain so that the pod does not start on the old size; an expansion the
// claim does not hand to the node yet, or one refused while in use, lets the mount through.
func (m *Manager) expandDuringMount(ctx context.Context, pod *v1.Pod, dv DesiredVolume) error {
	av, ok := m.asw.Volume(dv.Name)
	if !ok {
		return nil
	}
	size, grow := expansionTarget(dv, av)
	if !grow {
		return nil
	}
	err := m.nodeExpand(ctx, pod, dv, size)
	if err == nil || errors.Is(err, errNotNodeTurn) || errors.As(err, new(inUseExpansionError)) {
		return nil
	}
	return volume.NewUncertainError(volumeError(opsOf(dv.Spec.Block()).expandDuringMount, dv.Spec.Name(), err))
}

// nodeExpand expands dv to size on the node and records the outcome in the claim's status
// and the actual state; a success is announced by the events of upstream's node expander.
func (m *Manager) nodeExpand(ctx context.Context, pod *v1.Pod, dv DesiredVolume, size resource.Quantity) error {
	pvc := dv.Claim
	ep, err := m.plugins.FindExpandable(dv.Spec)
	if err != nil {
		return err
	}
	if err := m.beginNodeResize(ctx, pvc, size); err != nil {
		return err
	}
	if ep != nil {
		if err := ep.NodeExpand(ctx, dv.Spec, pod.UID, size); err != nil {
			// A transient failure keeps NodeResizeInProgress, as the API asks, and is
			// retried with backoff; the condition carries the error.
			st := v1.PersistentVolumeClaimNodeResizeInProgress
			if infeasible(err) {
				st = v1.PersistentVolumeClaimNodeResizeInfeasible
			}
			if serr := m.setClaimResizeStatus(ctx, pvc, st, fmt.Sprintf("failed to expand pvc with %v", err)); serr != nil {
				klog.FromContext(ctx).Error(serr, "Cannot record the failed expansion in the claim", "pvc", klog.KObj(pvc))
			}
			if status.Code(err) == codes.FailedPrecondition {
				m.asw.markInUseExpansionError(dv.Name)
				return inUseExpansionError{err}
			}
			return err
		}
	}
	if err := m.finishClaimResize(ctx, pvc, size); err != nil {
		return err
	}
	m.asw.setExpanded(dv.Name, size)
	msg := fmt.Sprintf("%s for volume %q %s", expandSucceeded, dv.Spec.Name(), m.cfg.NodeName)
	m.recorder.Event(pod, v1.EventTypeNormal, "FileSystemResizeSuccessful", msg)
	m.recorder.Event(pvc, v1.EventTypeNormal, "FileSystemResizeSuccessful", msg)
	return nil
}

// infeasible reports a NodeExpandVolume error that a retry cannot fix, as upstream's CSI
// expander classifies them: a bad argument or range stays bad, and a volume not found
// stays gone. FAILED_PRECONDITION (in use) is not infeasible: it only waits for the
// volume's next mount.
func infeasible(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return true
	}
	return false
}

// The claim's conditions and resize statuses are the protocol between the external resizer
// (controller side) and the kubelet (node side) of KEP-1790.

// errNotNodeTurn is returned when the claim read from the API server, fresher than the
// cache the decision was made on, says the node must not expand yet.
var errNotNodeTurn = volume.NewTransientError(errors.New("the claim's expansion is not pending on the node"))

// beginNodeResize marks the node's expansion in progress, after checking the claim's current
// status: the informer cache may lag behind the resizer.
func (m *Manager) beginNodeResize(ctx context.Context, pvc *v1.PersistentVolumeClaim, size resource.Quantity) error {
	return m.updateClaimStatus(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) error {
		if c := s.Capacity[v1.ResourceStorage]; c.Cmp(size) >= 0 || !nodeTurn(s) {
			return errNotNodeTurn
		}
		if s.AllocatedResourceStatuses == nil {
			s.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
		}
		s.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInProgress
		return nil
	})
}

// setClaimResizeStatus records a failed node expansion: its resize status, and its error as
// the NodeResizeError condition.
func (m *Manager) setClaimResizeStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, st v1.ClaimResourceStatus, msg string) error {
	return m.updateClaimStatus(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) error {
		if s.AllocatedResourceStatuses == nil {
			s.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
		}
		s.AllocatedResourceStatuses[v1.ResourceStorage] = st
		s.Conditions = withoutConditions(s.Conditions, v1.PersistentVolumeClaimNodeResizeError)
		s.Conditions = append(s.Conditions, v1.PersistentVolumeClaimCondition{
			Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(), Message: msg,
		})
		return nil
	})
}

// finishClaimResize marks the expansion done: the claim's capacity is the new size and the
// resize conditions and status are gone (upstream MarkFSResizeFinished).
func (m *Manager) finishClaimResize(ctx context.Context, pvc *v1.PersistentVolumeClaim, size resource.Quantity) error {
	return m.updateClaimStatus(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) error {
		if s.Capacity == nil {
			s.Capacity = v1.ResourceList{}
		}
		s.Capacity[v1.ResourceStorage] = size
		delete(s.AllocatedResourceStatuses, v1.ResourceStorage)
		s.Conditions = withoutConditions(s.Conditions, v1.PersistentVolumeClaimFileSystemResizePending, v1.PersistentVolumeClaimResizing, v1.PersistentVolumeClaimNodeResizeError)
		return nil
	})
}

// updateClaimStatus applies change to the claim's current status; a conflict rereads it, so
// the resizer's concurrent writes are never overwritten. Without an API client (standalone)
// there is no claim to update.
func (m *Manager) updateClaimStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, change func(*v1.PersistentVolumeClaimStatus) error) error {
	if m.cfg.Client == nil {
		return nil
	}
	// The cached claim is stale once written: the next pass reads it again.
	defer m.claims.forget(pvc.Namespace, pvc.Name)
	// The node's identity may update a claim's status (the node authorizer), as the
	// kubelet does.
	_, err := write.Claims(m.cfg.Client, write.Update, write.Update).ChangeStatus(ctx, pvc, func(cur *v1.PersistentVolumeClaim) error {
		return change(&cur.Status)
	})
	return err
}

func withoutConditions(conds []v1.PersistentVolumeClaimCondition, types ...v1.PersistentVolumeClaimConditionType) []v1.PersistentVolumeClaimCondition {
	out := conds[:0:0]
	for _, c := range conds {
		drop := false
		for _, t := range types {
			drop = drop || c.Type == t
		}
		if !drop {
			out = append(out, c)
		}
	}
	return out
}
