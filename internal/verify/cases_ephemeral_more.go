package verify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// inlineVolume is an inline CSI volume of the driver with the class's parameters as its
// attributes.
func (k *caseEnv) inlineVolume(name string, readOnly bool) corev1.Volume {
	attrs := map[string]string{}
	if k.base != nil {
		for key, v := range k.base.Parameters {
			if !strings.HasPrefix(key, "csi.storage.k8s.io/") {
				attrs[key] = v
			}
		}
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: k.driver, VolumeAttributes: attrs, ReadOnly: ptr.To(readOnly)}}}
}

// inlineSeparate: two pods with the same inline volume get a volume each (upstream's
// ephemeral "should support two pods which have the same volume definition"), and a
// readOnly inline volume refuses writes.
func inlineSeparate(k *caseEnv) error {
	a, err := k.runPod("a", []corev1.Volume{k.inlineVolume("scratch", false)}, nil, nil)
	if err != nil {
		return err
	}
	b, err := k.runPod("b", []corev1.Volume{k.inlineVolume("scratch", false)}, nil, nil)
	if err != nil {
		return err
	}
	dirA, dirB := k.mountPath(a, "scratch"), k.mountPath(b, "scratch")
	if err := os.WriteFile(filepath.Join(dirA, "mine"), []byte("a"), 0o644); err != nil {
		return fmt.Errorf("write through the mount path: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dirB, "mine")); err == nil {
		return fmt.Errorf("pod b's inline volume shows pod a's file: both pods got one volume")
	}
	ro, err := k.runPod("ro", []corev1.Volume{k.inlineVolume("scratch", true)}, nil, nil)
	if err != nil {
		return err
	}
	return checkReadOnly(k.mountPath(ro, "scratch"))
}

// checkReadOnly checks that a mount refuses a write with EROFS.
func checkReadOnly(dir string) error {
	err := os.WriteFile(filepath.Join(dir, "must-fail"), []byte("x"), 0o644)
	if err == nil {
		return fmt.Errorf("wrote into %s, a readOnly volume", dir)
	}
	if !errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("writing into the readOnly volume failed with %v, want EROFS", err)
	}
	return nil
}

// ephemeralClaim is a generic ephemeral volume of class, size and mode.
func ephemeralClaim(name, class, size string, mode corev1.PersistentVolumeMode) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			VolumeMode:       &mode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity(size)}},
		}},
	}}}
}

// genericBlock: a generic ephemeral volume of volumeMode Block is mapped as a device that
// takes writes, and goes with its pod.
func genericBlock(k *caseEnv) error {
	// A driver that refuses raw block makes the case not applicable, as block/raw.
	p, err := k.blockPodOf("app", ephemeralClaim("dev", k.classes[classBlock], defaultSize, corev1.PersistentVolumeBlock))
	if err != nil {
		return err
	}
	pv, err := k.boundPV(p.Name + "-dev")
	if err != nil {
		return err
	}
	if k.root != "" {
		want := []byte("ephemeral block of " + k.ns)
		if err := writeDevice(k.devicePath(p, pv.Name), want); err != nil {
			return err
		}
		if err := checkDevice(k.devicePath(p, pv.Name), want); err != nil {
			return err
		}
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	return k.waitPVGone(pv.Name)
}

// genericExpand: the claim of a generic ephemeral volume grows online; the filesystem in
// the pod's mount grows with it (upstream's ephemeral "should support expansion").
func genericExpand(k *caseEnv) error {
	p, err := k.runPod("app", []corev1.Volume{ephemeralClaim("data", k.classes[classFS], fsSizeBefore, corev1.PersistentVolumeFilesystem)}, nil, nil)
	if err != nil {
		return err
	}
	claim := p.Name + "-data"
	pv, err := k.boundPV(claim)
	if err != nil {
		return err
	}
	dir := k.mountPath(p, pv.Name)
	v, why, err := k.observe(dir, claim)
	if err != nil {
		return err
	}
	want, err := k.writeProof(dir)
	if err != nil {
		return err
	}
	if err := k.expand(claim, fsSizeAfter); err != nil {
		return err
	}
	if err := k.waitCapacity(claim, fsSizeAfter); err != nil {
		return err
	}
	return grown(dir, sizeBefore{v, why}, want)
}
