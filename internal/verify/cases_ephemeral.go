package verify

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

func inlineApplies(e *env) string {
	if !slices.Contains(e.csiDriver.Spec.VolumeLifecycleModes, storagev1.VolumeLifecycleEphemeral) {
		return "CSIDriver volumeLifecycleModes has no Ephemeral"
	}
	return ""
}

// inlineEphemeral: a CSI volume inline in the pod (the StorageClass parameters as its
// attributes) is mounted with the pod and removed with it.
func inlineEphemeral(k *caseEnv) error {
	v := k.inlineVolume("scratch", false)
	p, err := k.runPod("app", []corev1.Volume{v}, nil, nil)
	if err != nil {
		return err
	}
	if k.root == "" {
		return nil
	}
	dir := k.mountPath(p, "scratch")
	want, err := k.writeProof(dir)
	if err != nil {
		return err
	}
	if err := readProof(dir, want); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	if isMountPoint(dir) {
		return fmt.Errorf("inline volume still mounted at %s after its pod was deleted", dir)
	}
	return nil
}

// genericEphemeral: a claim made from the pod's template is provisioned, mounted, and
// deleted with the pod (owner reference, garbage collector), and its PV with it.
func genericEphemeral(k *caseEnv) error {
	class := k.classes[classWFFC]
	v := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity(defaultSize)}},
		}},
	}}}
	p, err := k.runPod("app", []corev1.Volume{v}, nil, nil)
	if err != nil {
		return err
	}
	claim := p.Name + "-" + v.Name
	pv, err := k.boundPV(claim)
	if err != nil {
		return err
	}
	if k.root != "" {
		dir := k.mountPath(p, pv.Name)
		if _, err := k.writeProof(dir); err != nil {
			return err
		}
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	if err := k.waitPVGone(pv.Name); err != nil {
		return fmt.Errorf("the pod's ephemeral claim was not deleted with it: %w", err)
	}
	return nil
}
