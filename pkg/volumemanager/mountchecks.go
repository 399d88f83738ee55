package volumemanager

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// errRWOPInUse is the kubelet's refusal of a second pod on a ReadWriteOncePod volume.
var errRWOPInUse = errors.New("volume uses the ReadWriteOncePod access mode and is already in use by another pod")

// checkBeforeMount makes the kubelet's checks of a persistent volume before it is set up for
// pod (upstream GenerateMountVolumeFunc): the PV's node affinity must match the node's labels,
// and a ReadWriteOncePod volume must not be mounted for another pod. The PV is read again
// first, so a node affinity changed since the pod was processed (mutable PV node affinity)
// is the one checked. It runs inside the volume's operation, which serializes every
// operation of a device-mountable volume, so two pods cannot pass the RWOP check at once.
func (m *Manager) checkBeforeMount(ctx context.Context, pod *v1.Pod, dv DesiredVolume) error {
	pv := dv.Spec.PersistentVolume
	if pv == nil {
		return nil
	}
	ops := opsOf(dv.Spec.Block())
	if pv.Spec.NodeAffinity != nil {
		cur, err := m.objects.GetVolume(ctx, pv.Name)
		if err != nil {
			return nodeAffinityError{volumeError(ops.nodeAffinity, dv.Spec.Name(), fmt.Errorf("get PV %s: %w", pv.Name, accessError(err)))}
		}
		labels, err := m.nodeLabels(ctx)
		if err != nil {
			return nodeAffinityError{volumeError(ops.nodeAffinity, dv.Spec.Name(), fmt.Errorf("get node %s: %w", m.cfg.NodeName, accessError(err)))}
		}
		if labels != nil {
			if err := storagehelpers.CheckNodeAffinity(cur, labels); err != nil {
				return nodeAffinityError{volumeError(ops.nodeAffinity, dv.Spec.Name(), err)}
			}
		}
	}
	if isRWOP(pv) {
		for _, mv := range m.asw.VolumePods(dv.Name) {
			if mv.PodUID != pod.UID {
				return volumeError(ops.inUse, dv.Spec.Name(), errRWOPInUse)
			}
		}
	}
	return nil
}

// isRWOP: ReadWriteOncePod is the PV's only access mode, as the kubelet requires for its
// check (the API allows RWOP only alone).
func isRWOP(pv *v1.PersistentVolume) bool {
	modes := pv.Spec.AccessModes
	return len(modes) == 1 && modes[0] == v1.ReadWriteOncePod
}

// nodeLabels are the labels of the manager's Node: Config.NodeLabels, or a GET of the Node
// (which the Node authorizer grants a node). nil without either: the check is skipped.
func (m *Manager) nodeLabels(ctx context.Context) (map[string]string, error) {
	if m.cfg.NodeLabels != nil {
		return m.cfg.NodeLabels(ctx)
	}
	if m.cfg.Client == nil {
		return nil, nil
	}
	n, err := m.cfg.Client.CoreV1().Nodes().Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if n.Labels == nil {
		return map[string]string{}, nil
	}
	return n.Labels, nil
}
