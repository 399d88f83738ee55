package resizer

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// podsByClaim indexes pods by the "namespace/name" keys of the claims they use.
const podsByClaim = "claim"

// watchPods keeps, for each pod, only what tells which claims it uses and whether it still
// runs: a cluster's pods are many and large, and the resizer needs a few bytes of each.
func (c *Controller) watchPods(factory informers.SharedInformerFactory) error {
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.SetTransform(slimPod); err != nil {
		return err
	}
	if err := inf.AddIndexers(cache.Indexers{podsByClaim: claimKeysOf}); err != nil {
		return err
	}
	// A pod that ends or goes away may be the last user of a claim waiting to be expanded.
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && podDone(pod) {
				c.enqueueClaimsOf(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				c.enqueueClaimsOf(pod)
			}
		},
	})
	if err != nil {
		return err
	}
	c.pods = inf.GetIndexer()
	return nil
}

func (c *Controller) enqueueClaimsOf(pod *corev1.Pod) {
	keys, _ := claimKeysOf(pod)
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// slimPod drops all of a pod but its identity, its claim volumes and its phase.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown carries an already slim pod
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			slim.Spec.Volumes = append(slim.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		} else if v.Ephemeral != nil {
			// Only the name matters: the claim of a generic ephemeral volume is <pod>-<volume>.
			slim.Spec.Volumes = append(slim.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
		}
	}
	return slim, nil
}

func claimKeysOf(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			keys = append(keys, pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			keys = append(keys, pod.Namespace+"/"+pod.Name+"-"+v.Name)
		}
	}
	return keys, nil
}

func podDone(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// userOf returns a pod that may have the claim's volume published, or "".
func (c *Controller) userOf(key string) string {
	if c.pods == nil {
		return ""
	}
	objs, err := c.pods.ByIndex(podsByClaim, key)
	if err != nil {
		return ""
	}
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok && !podDone(pod) {
			return pod.Namespace + "/" + pod.Name
		}
	}
	return ""
}
