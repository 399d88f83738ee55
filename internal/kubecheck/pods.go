package kubecheck

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/pkg/podstatus"
)

// VolumesReady is the pod condition the node agent sets once every volume is set up (the
// kubelet has no such condition: it starts the containers instead).
const VolumesReady = podstatus.VolumesReadyCondition

// PodCondition is the status of the pod's condition t, Unknown when it has none.
func PodCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// VolumesUp says that the node has set up every volume of the pod: the node agent's
// condition, or, on a real kubelet, PodReadyToStartContainers. The kubelet's syncPod waits
// for the pod's volumes to be attached and mounted (WaitForAttachAndMount) before it asks the
// runtime for the sandbox, and the condition is True once the sandbox is up, so it is never
// True before the volumes are.
func VolumesUp(p *corev1.Pod) bool {
	return PodCondition(p, VolumesReady) == corev1.ConditionTrue ||
		PodCondition(p, corev1.PodReadyToStartContainers) == corev1.ConditionTrue
}

// VolumesReadyTrue holds for a pod whose VolumesReady condition is True: the node agent's
// (or kubevol's volume manager's) own word, not the kubelet's.
func VolumesReadyTrue(p *corev1.Pod) bool {
	return PodCondition(p, VolumesReady) == corev1.ConditionTrue
}

// WaitVolumesUp waits for the node to set up every volume of the pod (VolumesUp), and
// returns the pod as it read it then.
func WaitVolumesUp(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	return WaitPod(ctx, cs, ns, name, timeout, VolumesUp)
}

// WaitPod waits until cond holds for the pod, and returns the pod as it read it then. The
// error carries the node agent's last word on the volumes.
func WaitPod(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var cur *corev1.Pod
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cur = p
		return cond(p), nil
	})
	if err != nil {
		last := "never read"
		if cur != nil {
			last = "no VolumesReady condition"
			for _, c := range cur.Status.Conditions {
				if c.Type == VolumesReady {
					last = fmt.Sprintf("%s: %s", c.Reason, c.Message)
				}
			}
		}
		return nil, fmt.Errorf("volumes of pod %s/%s not ready: %w (last: %s)", ns, name, err, last)
	}
	return cur, nil
}

// CreatePod creates the pod in ns, retrying while the apiserver refuses it: the ServiceAccount
// admission plugin refuses pods until the namespace's default ServiceAccount exists.
func CreatePod(ctx context.Context, cs kubernetes.Interface, ns string, pod *corev1.Pod, timeout time.Duration) (*corev1.Pod, error) {
	var created *corev1.Pod
	var lastErr error
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		created, lastErr = cs.CoreV1().Pods(ns).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
		return lastErr == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %v", pod.Name, lastErr)
	}
	return created, nil
}

// ClaimVolume is a pod volume named name of the claim.
func ClaimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// VolumePod is a pod in ns pinned to node (by its hostname label) whose one container, of
// image, mounts each of mounts at /<name> and maps each of devices at /dev/<name>.
func VolumePod(ns, name, node, image string, mounts, devices []corev1.Volume) *corev1.Pod {
	c := corev1.Container{Name: "app", Image: image}
	for _, v := range mounts {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	for _, v := range devices {
		c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: v.Name, DevicePath: "/dev/" + v.Name})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers:   []corev1.Container{c},
			Volumes:      append(append([]corev1.Volume{}, mounts...), devices...),
		},
	}
}
