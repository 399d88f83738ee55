package verify

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// deletedWhileDown: pods deleted while the node agent is down, one gracefully and one by
// force (upstream's disruptive "should unmount if pod is gracefully/force deleted while
// kubelet is down"). The agent is frozen (SIGSTOP), the pods deleted, the agent killed;
// the agent kubevol up starts again must tear both down: no mount, no staging, no
// VolumeAttachment left, the graceful deletion finished, and a new pod mounts each volume.
func deletedWhileDown(k *caseEnv) error {
	type used struct {
		u       *inUse
		pv      *corev1.PersistentVolume
		staging string
	}
	all := map[string]*used{}
	for _, name := range []string{"graceful", "forced"} {
		u, err := k.useClaim(name, classWFFC, defaultSize, name)
		if err != nil {
			return err
		}
		u.vols = []corev1.Volume{kubecheck.ClaimVolume("data", name)}
		pv, err := k.boundPV(name)
		if err != nil {
			return err
		}
		all[name] = &used{u: u, pv: pv}
		if k.hasNode(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
			all[name].staging = k.stagingPath(pv)
		}
	}
	old, err := nodeAgentPID(k.root)
	if err != nil {
		return err
	}
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop node agent %d: %w", old, err)
	}
	// Never leave a frozen agent behind, whatever fails below.
	defer func() { _ = syscall.Kill(old, syscall.SIGCONT) }()
	pods := k.cs.CoreV1().Pods(k.ns)
	if err := pods.Delete(k.ctx, "graceful", metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := pods.Delete(k.ctx, "forced", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		return err
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill node agent %d: %w", old, err)
	}
	err = kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		pid, _ := nodeAgentPID(k.root)
		return pid != 0 && pid != old, nil
	})
	if err != nil {
		return fmt.Errorf("no node agent came back within %s (does kubevol up supervise it? its restart backoff doubles with each kill: kubevol up --restart-backoff-max)", waitTimeout)
	}
	if err := k.deletePod("graceful"); err != nil {
		return fmt.Errorf("the restarted agent did not finish the graceful deletion: %w", err)
	}
	for name, c := range all {
		if err := k.waitUnmounted(c.u.dir); err != nil {
			return fmt.Errorf("pod %s, deleted while the agent was down: %w", name, err)
		}
		if c.staging != "" {
			if err := k.waitGone(c.staging); err != nil {
				return fmt.Errorf("pod %s, deleted while the agent was down: staging path %s left: %w", name, c.staging, err)
			}
		}
		if k.attachRequired() {
			if err := k.waitDetached(c.pv.Name); err != nil {
				return fmt.Errorf("pod %s, deleted while the agent was down: %w", name, err)
			}
		}
	}
	for name, c := range all {
		if err := k.reuse(c.u, name, name+"-again"); err != nil {
			return err
		}
	}
	return nil
}

// waitUnmounted waits for a pod's mount path to be unmounted and removed.
func (k *caseEnv) waitUnmounted(dir string) error {
	err := kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		_, err := os.Lstat(dir)
		return !isMountPoint(dir) && os.IsNotExist(err), nil
	})
	if err != nil {
		return fmt.Errorf("%s still mounted or present: %w", dir, err)
	}
	return nil
}

// waitDetached waits for the VolumeAttachment of a PV on the node to go.
func (k *caseEnv) waitDetached(pv string) error {
	err := kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		va, err := k.attachment(pv)
		return err == nil && va == nil, nil
	})
	if err != nil {
		return fmt.Errorf("VolumeAttachment of %s on %s left: %w", pv, k.node, err)
	}
	return nil
}
