package verify

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// reclaimDelete: deleting the claim of a Delete class deletes the PV and, through the
// driver, the volume (not listed any more, when the driver can list).
func reclaimDelete(k *caseEnv) error {
	if _, err := k.fsClaim("data", classImmediate); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.deleteClaim("data"); err != nil {
		return err
	}
	return k.checkListed(pv.Spec.CSI.VolumeHandle, false)
}

// reclaimRetain: the PV of a Retain class outlives its claim, Released, with its volume;
// verify then deletes it through the provisioner and the driver so nothing is left.
func reclaimRetain(k *caseEnv) error {
	if _, err := k.fsClaim("data", classRetain); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Delete(k.ctx, "data", metav1.DeleteOptions{}); err != nil {
		return err
	}
	err = kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		cur, err := k.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the PV of a Retain claim was deleted with the claim")
		}
		return err == nil && cur.Status.Phase == corev1.VolumeReleased, nil
	})
	if err != nil {
		return err
	}
	if err := k.checkListed(pv.Spec.CSI.VolumeHandle, true); err != nil {
		return err
	}
	if err := k.deleteRetained(pv.Name); err != nil {
		return err
	}
	if err := k.waitPVGone(pv.Name); err != nil {
		return fmt.Errorf("the released PV, switched to Delete, was not deleted: %w", err)
	}
	return k.checkListed(pv.Spec.CSI.VolumeHandle, false)
}

// checkListed checks ListVolumes (when the driver offers it) for a volume.
func (k *caseEnv) checkListed(handle string, want bool) error {
	if k.conn == nil || !k.caps.controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] {
		return nil
	}
	vols, err := k.listVolumes(k.ctx)
	if err != nil {
		return fmt.Errorf("ListVolumes: %w", err)
	}
	if vols[handle] != want {
		if want {
			return fmt.Errorf("ListVolumes does not list volume %s, which its Released PV retains", handle)
		}
		return fmt.Errorf("ListVolumes still lists volume %s after its PV was deleted", handle)
	}
	return nil
}
