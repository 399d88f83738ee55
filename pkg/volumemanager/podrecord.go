package volumemanager

import (
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podRecord is what the manager knows about one pod beyond the desired and actual states
// (which keep their upstream roles): the last object seen, what its volumes refer to, and
// what has been done and reported for it. The pod workers, the event handlers and the
// operations' completions all read and write it, so it lives in podRecords under one lock.
type podRecord struct {
	// pod is the last object seen, kept after the pod is deleted until it is torn down.
	pod     *v1.Pod
	deleted bool
	// refs are the objects the pod's volumes refer to, as indexed in podRecords.byRef.
	refs []volumeRef
	// remountSeq counts content changes of the pod's volumes, so that a SetUp that raced
	// with one leaves its volume marked for remount.
	remountSeq uint64
	// status is what the observer was last told while the pod wanted volumes; reported
	// says whether it was told anything.
	status   podStatus
	reported bool
	// heldMessage is the last failure reported of volumes the pod keeps (reportHeld).
	heldMessage string
	// opErrors is the last final error of each volume's operations, until one succeeds.
	opErrors map[v1.UniqueVolumeName]string
	// tornDown is what the observer was last told about the pod's teardown.
	tornDown tornDownState
	// subpathsDone: every subPath is bind-mounted; subpathErr is why one was refused.
	subpathsDone bool
	subpathErr   string
}

type podStatus struct {
	ready   bool
	message string
}

// tornDownState is what the observer was last told about a torn-down pod; zero is nothing.
type tornDownState uint8

const (
	tornDownAlive    tornDownState = iota + 1 // terminal, not being deleted
	tornDownDeleting                          // being deleted (or gone)
)

// volumeRef is an object a pod volume refers to: ref is "configmap/ns/name",
// "secret/ns/name" or "pvc/ns/name", volume the pod volume's name.
type volumeRef struct{ ref, volume string }

// podRecords holds one record per pod the manager knows, and the index from referred
// objects to the pods that refer to them, so an event reaches exactly those pods. A record
// is created only by note (an informer event of the pod) and destroyed only by forget (the
// pod gone and its volumes torn down); every other method changes nothing for a pod without
// one.
type podRecords struct {
	mu    sync.Mutex
	byUID map[types.UID]*podRecord
	byRef map[string]map[types.UID][]string // ref → pod → pod volumes referring to it
}

func newPodRecords() *podRecords {
	return &podRecords{byUID: map[types.UID]*podRecord{}, byRef: map[string]map[types.UID][]string{}}
}

// note records the latest object of a pod, creating its record on the first one.
func (rs *podRecords) note(pod *v1.Pod, deleted bool) {
	refs := podRefs(pod)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.byUID[pod.UID]
	if r == nil {
		r = &podRecord{}
		rs.byUID[pod.UID] = r
	}
	r.pod = pod
	r.deleted = r.deleted || deleted
	rs.unindexLocked(pod.UID, r.refs)
	r.refs = refs
	for _, vr := range refs {
		if rs.byRef[vr.ref] == nil {
			rs.byRef[vr.ref] = map[types.UID][]string{}
		}
		rs.byRef[vr.ref][pod.UID] = append(rs.byRef[vr.ref][pod.UID], vr.volume)
	}
}

// forget destroys the record of a pod.
func (rs *podRecords) forget(uid types.UID) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r := rs.byUID[uid]; r != nil {
		rs.unindexLocked(uid, r.refs)
		delete(rs.byUID, uid)
	}
}

func (rs *podRecords) unindexLocked(uid types.UID, refs []volumeRef) {
	for _, vr := range refs {
		delete(rs.byRef[vr.ref], uid)
		if len(rs.byRef[vr.ref]) == 0 {
			delete(rs.byRef, vr.ref)
		}
	}
}

// with runs fn on the pod's record under the lock and reports whether there is one. fn
// must not block: it must not call into the desired or actual state.
func (rs *podRecords) with(uid types.UID, fn func(r *podRecord)) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.byUID[uid]
	if r == nil {
		return false
	}
	fn(r)
	return true
}

// object returns the last object seen of the pod and whether it is deleted; nil without a
// record.
func (rs *podRecords) object(uid types.UID) (pod *v1.Pod, deleted bool) {
	rs.with(uid, func(r *podRecord) { pod, deleted = r.pod, r.deleted })
	return pod, deleted
}

// uids lists the pods with a record.
func (rs *podRecords) uids() []types.UID {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Collect(maps.Keys(rs.byUID))
}

// referring returns the pods referring to ref, with the names of the pod volumes that do.
func (rs *podRecords) referring(ref string) map[types.UID][]string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return maps.Clone(rs.byRef[ref])
}

// setOpError records (msg non-empty) or clears the last final error of a pod's volume.
func (rs *podRecords) setOpError(uid types.UID, name v1.UniqueVolumeName, msg string) {
	rs.with(uid, func(r *podRecord) {
		switch {
		case msg == "":
			delete(r.opErrors, name)
		case r.opErrors == nil:
			r.opErrors = map[v1.UniqueVolumeName]string{name: msg}
		default:
			r.opErrors[name] = msg
		}
	})
}
