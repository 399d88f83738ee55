package verify

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// rwopMessage is the kubelet's refusal of a second pod on a ReadWriteOncePod volume.
const rwopMessage = "volume uses the ReadWriteOncePod access mode and is already in use by another pod"

// readWriteOncePodOnNode: a second pod bound straight to the node (past the scheduler's own
// check) on a ReadWriteOncePod claim in use is refused by the node with the kubelet's
// FailedMount message, and mounts once the first pod is gone.
func readWriteOncePodOnNode(k *caseEnv) error {
	if _, err := k.claim("data", classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOncePod, nil); err != nil {
		return err
	}
	vols := []corev1.Volume{kubecheck.ClaimVolume("data", "data")}
	first, err := k.runPod("first", vols, nil, nil)
	if err != nil {
		return err
	}
	second, err := k.pod("second", vols, nil, func(p *corev1.Pod) {
		p.Spec.NodeSelector = nil
		p.Spec.NodeName = first.Spec.NodeName
	})
	if err != nil {
		return err
	}
	err = kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		evs, err := k.cs.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + second.Name + ",reason=FailedMount"})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, rwopMessage) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the node did not refuse the second pod of a ReadWriteOncePod claim in use with FailedMount %q: %v", rwopMessage, err)
	}
	if err := k.deletePod("first"); err != nil {
		return err
	}
	_, err = k.ready(second)
	return err
}
