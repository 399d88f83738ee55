package volumemanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podRefs lists what a pod's volumes refer to.
func podRefs(pod *v1.Pod) []volumeRef {
	ns := pod.Namespace
	var refs []volumeRef
	add := func(kind, name, volume string) { refs = append(refs, volumeRef{kind + "/" + ns + "/" + name, volume}) }
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add("configmap", v.ConfigMap.Name, v.Name)
		case v.Secret != nil:
			add("secret", v.Secret.SecretName, v.Name)
		case v.PersistentVolumeClaim != nil:
			add("pvc", v.PersistentVolumeClaim.ClaimName, v.Name)
		case v.Ephemeral != nil:
			add("pvc", pod.Name+"-"+v.Name, v.Name)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add("configmap", s.ConfigMap.Name, v.Name)
				}
				if s.Secret != nil {
					add("secret", s.Secret.Name, v.Name)
				}
			}
		}
	}
	return refs
}

func (m *Manager) addHandlers(pods, pvcs, pvs, cms, secrets cache.SharedIndexInformer) error {
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	}); err != nil {
		return err
	}
	if _, err := pvcs.AddEventHandler(m.refHandler(func(obj any) string {
		pvc := obj.(*v1.PersistentVolumeClaim)
		return "pvc/" + pvc.Namespace + "/" + pvc.Name
	}, false)); err != nil {
		return err
	}
	if _, err := pvs.AddEventHandler(m.refHandler(func(obj any) string {
		pv := obj.(*v1.PersistentVolume)
		if pv.Spec.ClaimRef == nil {
			return ""
		}
		return "pvc/" + pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name
	}, false)); err != nil {
		return err
	}
	if _, err := cms.AddEventHandler(m.refHandler(func(obj any) string {
		cm := obj.(*v1.ConfigMap)
		return "configmap/" + cm.Namespace + "/" + cm.Name
	}, true)); err != nil {
		return err
	}
	_, err := secrets.AddEventHandler(m.refHandler(func(obj any) string {
		s := obj.(*v1.Secret)
		return "secret/" + s.Namespace + "/" + s.Name
	}, true))
	return err
}

// refHandler enqueues the pods that refer to the changed object. For contents (ConfigMaps,
// Secrets) their volumes are marked for remount and their backoff is reset: a missing
// object that appears mounts at once.
func (m *Manager) refHandler(refOf func(any) string, contents bool) cache.ResourceEventHandler {
	handle := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		ref := refOf(obj)
		if ref == "" {
			return
		}
		for uid, volumes := range m.records.referring(ref) {
			if contents {
				m.markRemount(uid, volumes)
			}
			m.exec.ResetBackoff(uid)
			m.podQueue.Add(uid)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: handle,
		UpdateFunc: func(oldObj, newObj any) {
			if o, ok := oldObj.(interface{ GetResourceVersion() string }); ok {
				if n, ok := newObj.(interface{ GetResourceVersion() string }); ok && o.GetResourceVersion() == n.GetResourceVersion() {
					return
				}
			}
			handle(newObj)
		},
		DeleteFunc: handle,
	}
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
	m.asw.MarkRemountRequired(uid, names)
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
