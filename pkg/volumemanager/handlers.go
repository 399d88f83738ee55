package volumemanager

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func labelsEverything() labels.Selector { return labels.Everything() }

// refIndex maps an object a pod refers to ("configmap/ns/name", "secret/ns/name",
// "pvc/ns/name") to the pods that refer to it, so an event enqueues exactly those pods.
type refIndex struct {
	mu    sync.Mutex
	byRef map[string]map[types.UID]bool
	byPod map[types.UID][]string
}

func newRefIndex() *refIndex {
	return &refIndex{byRef: map[string]map[types.UID]bool{}, byPod: map[types.UID][]string{}}
}

func (r *refIndex) set(uid types.UID, refs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(uid)
	for _, ref := range refs {
		if r.byRef[ref] == nil {
			r.byRef[ref] = map[types.UID]bool{}
		}
		r.byRef[ref][uid] = true
	}
	if len(refs) > 0 {
		r.byPod[uid] = refs
	}
}

func (r *refIndex) remove(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(uid)
}

func (r *refIndex) removeLocked(uid types.UID) {
	for _, ref := range r.byPod[uid] {
		delete(r.byRef[ref], uid)
		if len(r.byRef[ref]) == 0 {
			delete(r.byRef, ref)
		}
	}
	delete(r.byPod, uid)
}

func (r *refIndex) pods(ref string) []types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]types.UID, 0, len(r.byRef[ref]))
	for uid := range r.byRef[ref] {
		out = append(out, uid)
	}
	return out
}

// podRefs lists what a pod's volumes refer to.
func podRefs(pod *v1.Pod) []string {
	ns := pod.Namespace
	var refs []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			refs = append(refs, "configmap/"+ns+"/"+v.ConfigMap.Name)
		case v.Secret != nil:
			refs = append(refs, "secret/"+ns+"/"+v.Secret.SecretName)
		case v.PersistentVolumeClaim != nil:
			refs = append(refs, "pvc/"+ns+"/"+v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			refs = append(refs, "pvc/"+ns+"/"+pod.Name+"-"+v.Name)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					refs = append(refs, "configmap/"+ns+"/"+s.ConfigMap.Name)
				}
				if s.Secret != nil {
					refs = append(refs, "secret/"+ns+"/"+s.Secret.Name)
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
				m.notePod(pod, false)
				m.podQueue.Add(pod.UID)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			oldPod, ok1 := oldObj.(*v1.Pod)
			pod, ok2 := newObj.(*v1.Pod)
			if !ok1 || !ok2 {
				return
			}
			m.notePod(pod, false)
			// Labels and annotations feed the downward API: refresh like a ConfigMap change.
			if !equalMaps(oldPod.Labels, pod.Labels) || !equalMaps(oldPod.Annotations, pod.Annotations) {
				m.markRemount(pod.UID)
			}
			m.podQueue.Add(pod.UID)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				m.notePod(pod, true)
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
		for _, uid := range m.refs.pods(ref) {
			if contents {
				m.markRemount(uid)
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

// notePod remembers the latest object of a pod, also once it is deleted, until its
// volumes are torn down.
func (m *Manager) notePod(pod *v1.Pod, deleted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pods[pod.UID] = pod
	if deleted {
		m.deleted[pod.UID] = true
	}
	m.refs.set(pod.UID, podRefs(pod))
}

// markRemount makes the pod's refreshable volumes set up again. The sequence number lets a
// SetUp that raced with the change leave the volume marked.
func (m *Manager) markRemount(uid types.UID) {
	m.mu.Lock()
	m.remountSeq[uid]++
	m.mu.Unlock()
	var names []v1.UniqueVolumeName
	for _, dv := range m.dsw.PodVolumes(uid) {
		if dv.RequiresRemount {
			names = append(names, dv.Name)
		}
	}
	m.asw.MarkRemountRequired(uid, names)
}

func (m *Manager) remountSeqOf(uid types.UID) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.remountSeq[uid]
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
