package provisioner_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// The real scheduler picks the node of a pod that uses a WaitForFirstConsumer claim and sets
// selected-node; the provisioner creates the volume in that node's topology; the scheduler
// then binds the pod. (No kubelet runs: the pod is only scheduled.)
func TestScheduledPodDrivesWaitForFirstConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.makeSchedulable()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := e.class(func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = &wffc })
	pvc := e.createClaim(claimSpec("web-data", sc.Name, "16Mi", nil))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{topologyKey: e.node},
			AutomountServiceAccountToken: ptr.To(false),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                   []corev1.Container{{Name: "c", Image: "none", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}},
		},
	}
	// The namespace's default ServiceAccount may not exist yet; admission then refuses pods.
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil
	})
	fatalIf(t, err, "create pod")
	_, pv := e.waitBound(pvc.Name, 2*time.Minute)
	if v := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]; v != e.node {
		t.Errorf("volume on %s, want %s", v, e.node)
	}
	err = wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == e.node, nil
	})
	fatalIf(t, err, "pod was not scheduled to %s", e.node)
	fatalIf(t, e.cs.CoreV1().Pods(e.ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}), "delete pod")
	e.deleteClaim(pvc.Name)
	e.waitGone(e.pvGetter(pv.Name), "PV", 2*time.Minute)
	e.waitVolumes(0, 30*time.Second)
}

// makeSchedulable gives the test's node the capacity the scheduler needs to place a pod.
func (e *env) makeSchedulable() {
	e.t.Helper()
	node, err := e.cs.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	fatalIf(e.t, err, "get node")
	res := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	node.Status.Capacity, node.Status.Allocatable = res, res
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "Test"}}
	_, err = e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{})
	fatalIf(e.t, err, "node status")
}
