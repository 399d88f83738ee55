package volumemanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podRefs lists what a pod's volumes refer to.
func podRefs(pod *v1.Pod) []volumeRef {
	var refs []volumeRef
	eachRef(pod, func(kind, name, volume string) {
		refs = append(refs, volumeRef{kind + "/" + pod.Namespace + "/" + name, volume})
	})
	return refs
}

// eachRef calls fn with each object ("configmap", "secret" or "pvc") a pod volume refers to.
func eachRef(pod *v1.Pod, fn func(kind, name, volume string)) {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			fn("configmap", v.ConfigMap.Name, v.Name)
		case v.Secret != nil:
			fn("secret", v.Secret.SecretName, v.Name)
		case v.PersistentVolumeClaim != nil:
			fn("pvc", v.PersistentVolumeClaim.ClaimName, v.Name)
		case v.Ephemeral != nil:
			fn("pvc", pod.Name+"-"+v.Name, v.Name)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					fn("configmap", src.ConfigMap.Name, v.Name)
				}
				if src.Secret != nil {
					fn("secret", src.Secret.Name, v.Name)
				}
			}
		}
	}
}

func (m *Manager) addPodHandler(pods PodSource) error {
	return pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				m.records.note(pod, false)
				m.podQueue.Add(pod.UID)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			oldPod, ok1 := oldObj.(*v1.Pod)
			pod, ok2 := newObj.(*v1.Pod)
			if !ok1 || !ok2 {
				return
			}
			m.records.note(pod, false)
			// Labels and annotations feed the downward API: refresh like a ConfigMap change.
			if !equalMaps(oldPod.Labels, pod.Labels) || !equalMaps(oldPod.Annotations, pod.Annotations) {
				m.markRemount(pod.UID, nil)
			}
			m.podQueue.Add(pod.UID)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				m.records.note(pod, true)
				m.podQueue.Add(pod.UID)
			}
		},
	})
}

// markRemount makes the named pod volumes (nil: all) that are refreshable set up again.
// The sequence number lets a SetUp that raced with the change leave the volume marked.
func (m *Manager) markRemount(uid types.UID, volumes []string) {
	m.records.with(uid, func(r *podRecord) { r.remountSeq++ })
	var names []v1.UniqueVolumeName
	for _, dv := range m.dsw.PodVolumes(uid) {
		if dv.RequiresRemount && (volumes == nil || overlaps(dv.OuterNames, volumes)) {
			names = append(names, dv.Name)
		}
	}
	m.asw.markRemountRequired(uid, names)
}

func (m *Manager) remountSeqOf(uid types.UID) (seq uint64) {
	m.records.with(uid, func(r *podRecord) { seq = r.remountSeq })
	return seq
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
