package verify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// blockPod runs a pod that maps a raw block claim. CSI has no capability for raw block: a
// driver without it refuses the claim with InvalidArgument. The case is then not applicable
// if a filesystem claim of the same class works, and fails otherwise (a bad parameter, say).
func (k *caseEnv) blockPod(name, claim string) (*corev1.Pod, error) {
	return k.blockPodOf(name, kubecheck.ClaimVolume(claim, claim))
}

// blockPodOf is blockPod for the pod's one device vol: a claim, or a generic ephemeral
// volume, whose claim the pod's name and the volume's name make.
func (k *caseEnv) blockPodOf(name string, vol corev1.Volume) (*corev1.Pod, error) {
	p, err := k.pod(name, nil, []corev1.Volume{vol}, nil)
	if err != nil {
		return nil, err
	}
	claim := p.Name + "-" + vol.Name
	if vol.PersistentVolumeClaim != nil {
		claim = vol.PersistentVolumeClaim.ClaimName
	}
	var refused string
	p, err = kubecheck.WaitPod(k.ctx, k.cs, k.ns, p.Name, waitTimeout, func(cur *corev1.Pod) bool {
		if kubecheck.VolumesUp(cur) {
			return true
		}
		refused = k.provisioningRefusal(k.ctx, claim)
		return refused != ""
	})
	if err != nil {
		return nil, err
	}
	if refused == "" {
		return p, nil
	}
	if err := k.deletePod(name); err != nil {
		return nil, err
	}
	if _, err := k.fsClaim("probe", classBlock); err != nil {
		return nil, err
	}
	if _, err := k.runPod("probe", []corev1.Volume{kubecheck.ClaimVolume("probe", "probe")}, nil, nil); err != nil {
		return nil, fmt.Errorf("the raw block claim was refused: %s", refused)
	}
	return nil, skip("the driver refuses raw block (a filesystem claim of the same class works): %s", refused)
}

// rawBlock: a volumeMode Block claim is mapped into the pod as a device; bytes written
// through it are read back by the next pod.
func rawBlock(k *caseEnv) error {
	if _, err := k.claim("dev", classBlock, defaultSize, corev1.PersistentVolumeBlock, corev1.ReadWriteOnce, nil); err != nil {
		return err
	}
	p1, err := k.blockPod("writer", "dev")
	if err != nil {
		return err
	}
	if k.root == "" {
		return nil
	}
	pv, err := k.boundPV("dev")
	if err != nil {
		return err
	}
	want := bytes.Repeat([]byte("kubevol verify "+k.ns+" "), 64)
	if err := writeDevice(k.devicePath(p1, pv.Name), want); err != nil {
		return err
	}
	if err := k.deletePod("writer"); err != nil {
		return err
	}
	p2, err := k.runPod("reader", nil, []corev1.Volume{kubecheck.ClaimVolume("dev", "dev")}, nil)
	if err != nil {
		return err
	}
	return checkDevice(k.devicePath(p2, pv.Name), want)
}

// checkDevice reads the start of a pod's device and compares it with what was written.
func checkDevice(path string, want []byte) error {
	got := make([]byte, len(want))
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open the pod's device: %w", err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, got); err != nil {
		return fmt.Errorf("read the pod's device: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("the next pod's device does not hold the bytes the first wrote")
	}
	return nil
}

func writeDevice(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open the pod's device: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write the pod's device: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
