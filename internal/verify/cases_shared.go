package verify

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// sharedClaim: two pods of one node share a ReadWriteOnce claim (RWO is per node, as
// upstream's multiVolume "concurrent access to the single volume from pods on the same
// node"): a write through one pod's mount is read through the other's; deleting one pod
// keeps the other's mount; the volume is unstaged only after the last pod.
func sharedClaim(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	vols := []corev1.Volume{kubecheck.ClaimVolume("data", "data")}
	a, err := k.runPod("a", vols, nil, nil)
	if err != nil {
		return err
	}
	b, err := k.runPod("b", vols, nil, nil)
	if err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	dirA, dirB := k.mountPath(a, pv.Name), k.mountPath(b, pv.Name)
	want, err := k.writeProof(dirA)
	if err != nil {
		return err
	}
	if err := readProof(dirB, want); err != nil {
		return fmt.Errorf("pod b does not see pod a's write: %w", err)
	}
	staging := ""
	if k.hasNode(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		staging = k.stagingPath(pv)
		if _, err := os.Stat(staging); err != nil {
			return fmt.Errorf("staging path of the shared volume: %w", err)
		}
	}
	if err := k.deletePod("a"); err != nil {
		return err
	}
	if !isMountPoint(dirB) {
		return fmt.Errorf("pod b's mount %s is gone with pod a", dirB)
	}
	if err := readProof(dirB, want); err != nil {
		return fmt.Errorf("after pod a was deleted: %w", err)
	}
	if staging != "" {
		if _, err := os.Stat(staging); err != nil {
			return fmt.Errorf("the volume was unstaged while pod b still uses it: %w", err)
		}
	}
	if err := k.deletePod("b"); err != nil {
		return err
	}
	if staging != "" {
		if err := k.waitGone(staging); err != nil {
			return fmt.Errorf("the volume stays staged after its last pod: %w", err)
		}
	}
	return nil
}

// stagingPath is where the node stages a CSI PV: plugins/kubernetes.io/csi/<driver>/
// <sha256(handle)>/globalmount, the kubelet's layout.
func (k *caseEnv) stagingPath(pv *corev1.PersistentVolume) string {
	sum := sha256.Sum256([]byte(pv.Spec.CSI.VolumeHandle))
	return filepath.Join(k.root, "plugins", "kubernetes.io", "csi", pv.Spec.CSI.Driver, fmt.Sprintf("%x", sum), "globalmount")
}

// waitGone waits for a host path to disappear; the node removes mount directories after
// their unmount.
func (k *caseEnv) waitGone(path string) error {
	return kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		_, err := os.Lstat(path)
		return errors.Is(err, os.ErrNotExist), nil
	})
}
