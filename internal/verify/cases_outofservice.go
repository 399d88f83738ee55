package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// outOfServiceTaint is the taint an operator puts on a node that is lost for good (the
// NodeOutOfServiceVolumeDetach feature): kube-controller-manager's pod garbage collector
// then force-deletes the node's terminating pods, and its attach/detach controller detaches
// their volumes without waiting for an unmount that will never come.
var outOfServiceTaint = corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// lostNode: a node is lost with a pod's volume mounted (upstream's disruptive "[Feature:
// NodeOutOfServiceVolumeDetach] ... should detach the volume after the node is tainted
// out-of-service"). Verify may act only on what kubevol up runs for it on this machine: it
// freezes the node agent of another node (SIGSTOP, as crash/deleted-while-down does) and
// reports the node NotReady, as the node lifecycle controller would after its grace
// period, without waiting for it; it deletes the pod and taints the node out-of-service.
// The pod must be force-deleted, the volume force-detached (its VolumeAttachment gone, with
// attach), and a new pod on the run's node must mount it with the data. Then the taint goes,
// the agent resumes, and must tear down what the deleted pod left. Not applicable to
// node-local volumes, which cannot follow the pod.
func lostNode(k *caseEnv) error {
	others, err := k.otherHostNodes(1)
	if err != nil {
		return err
	}
	lost, rescue := others[0], k.node
	root := k.nodeRoot(lost)
	podL, pv, err := k.claimOn("data", corev1.ReadWriteOnce, "lost", lost, rescue)
	if err != nil {
		return err
	}
	dir := mountPathOn(root, podL, pv.Name)
	want, err := k.writeProof(dir)
	if err != nil {
		return err
	}
	pid, err := nodeAgentPID(root)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop node agent %d of node %s: %w", pid, lost, err)
	}
	// Whatever fails below, the node comes back: agent resumed, taint removed.
	resumed := false
	resume := func() error {
		if resumed {
			return nil
		}
		resumed = true
		terr := k.setOutOfService(lost, false)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("resume node agent %d: %w", pid, err)
		}
		return terr
	}
	defer func() { _ = resume() }()
	if err := k.reportNotReady(lost); err != nil {
		return err
	}
	if err := k.cs.CoreV1().Pods(k.ns).Delete(k.ctx, "lost", metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := k.setOutOfService(lost, true); err != nil {
		return err
	}
	// The pod garbage collector looks every 20 s.
	if err := k.waitPodGone("lost", time.Minute); err != nil {
		return fmt.Errorf("the pod of the out-of-service node %s was not force-deleted: %w", lost, err)
	}
	if k.attachRequired() {
		err := kubecheck.Poll(k.ctx, time.Minute, func(context.Context) (bool, error) {
			va, err := k.attachmentOn(pv.Name, lost)
			return err == nil && va == nil, nil
		})
		if err != nil {
			return fmt.Errorf("the volume was not force-detached from the out-of-service node %s: %w", lost, err)
		}
	}
	p, err := k.runPod("rescued", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, onNode(rescue))
	if err != nil {
		return fmt.Errorf("the pod rescheduled to %s: %w", rescue, err)
	}
	if err := readProof(mountPathOn(k.root, p, pv.Name), want); err != nil {
		return fmt.Errorf("on node %s after the force-detach: %w", rescue, err)
	}
	if err := resume(); err != nil {
		return err
	}
	if err := k.leftNode(pv, root, dir); err != nil {
		return fmt.Errorf("node %s back in service: %w", lost, err)
	}
	return nil
}

// reportNotReady sets the Ready condition of a node whose agent is stopped to Unknown, what
// the node lifecycle controller writes once the node's lease is older than its grace
// period. The agent, resumed, reports Ready again.
func (k *caseEnv) reportNotReady(node string) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		Message: "kubevol verify: the node agent is stopped (lost node)", LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return err
	}
	_, err = k.cs.CoreV1().Nodes().Patch(k.ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// setOutOfService adds or removes the out-of-service taint of a node; the taint list is
// patched at the version read, again on a conflict (the node lifecycle controller taints
// an unreachable node meanwhile).
func (k *caseEnv) setOutOfService(node string, on bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), 30*time.Second)
	defer cancel()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == outOfServiceTaint.Key })
		if on {
			taints = append(taints, outOfServiceTaint)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion}, "spec": map[string]any{"taints": taints}})
		if err != nil {
			return err
		}
		_, err = k.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}
