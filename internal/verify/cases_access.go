package verify

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// readWriteOncePod: a second pod of a ReadWriteOncePod claim is not scheduled while the
// first uses it, and gets the volume once the first is gone.
func readWriteOncePod(k *caseEnv) error {
	if _, err := k.claim("data", classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOncePod, nil); err != nil {
		return err
	}
	vols := []corev1.Volume{kubecheck.ClaimVolume("data", "data")}
	if _, err := k.runPod("first", vols, nil, nil); err != nil {
		return err
	}
	second, err := k.pod("second", vols, nil, nil)
	if err != nil {
		return err
	}
	err = kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		p, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("the second pod of a ReadWriteOncePod claim was scheduled to %s while the first uses it", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if err := k.deletePod("first"); err != nil {
		return err
	}
	_, err = k.ready(second)
	return err
}

// readOnly: a claim mounted readOnly refuses writes in the pod's mount.
func readOnly(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	v := kubecheck.ClaimVolume("data", "data")
	v.PersistentVolumeClaim.ReadOnly = true
	p, err := k.runPod("app", []corev1.Volume{v}, nil, nil)
	if err != nil {
		return err
	}
	dir, err := k.claimPath(p, "data")
	if err != nil {
		return err
	}
	return checkReadOnly(dir)
}

func fsGroupApplies(e *env) string {
	p := e.csiDriver.Spec.FSGroupPolicy
	if p != nil && *p == storagev1.NoneFSGroupPolicy {
		return "CSIDriver fsGroupPolicy is None: the node leaves ownership to the driver"
	}
	return ""
}

// fsGroup: the pod's fsGroup owns the volume's root, with the setgid bit, as the kubelet
// applies it (fsGroupPolicy File, or ReadWriteOnceWithFSType for an RWO filesystem).
func fsGroup(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	const gid = 4321
	p, err := k.runPod("app", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(gid))}
	})
	if err != nil {
		return err
	}
	dir, err := k.claimPath(p, "data")
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if st.Gid != gid || st.Mode&unix.S_ISGID == 0 {
		return fmt.Errorf("volume root %s has gid %d, mode %o; want gid %d with setgid", dir, st.Gid, st.Mode&0o7777, gid)
	}
	return nil
}
