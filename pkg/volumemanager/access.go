package volumemanager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// The manager's side of its ObjectSource: which objects the pods reference, what a change
// of one means, and the claims it resolved.

// PodObjects lists the ConfigMaps and Secrets a pod's volumes project: the objects an
// ObjectSource keeps fresh for the pod (SetPodObjects).
func PodObjects(pod *v1.Pod) []ObjectRef {
	var out []ObjectRef
	eachRef(pod, func(kind, name, _ string) {
		if k, ok := objectKinds[kind]; ok {
			out = append(out, ObjectRef{Kind: k, Namespace: pod.Namespace, Name: name})
		}
	})
	return out
}

// objectKinds maps the kinds of podRefs to those of ObjectRef.
var objectKinds = map[string]ObjectKind{"configmap": KindConfigMap, "secret": KindSecret}

// refKey is the podRefs key of an object.
func refKey(ref ObjectRef) string {
	for k, v := range objectKinds {
		if v == ref.Kind {
			return k + "/" + ref.Namespace + "/" + ref.Name
		}
	}
	return ""
}

// trackObjects tells the source what pod needs while it wants its volumes; a pod that no
// longer does (deleted, terminating, terminal) releases its objects at once: its teardown
// reads nothing, and the node loses access to them when the pod goes.
func (m *Manager) trackObjects(uid types.UID, pod *v1.Pod) {
	if pod == nil {
		m.objects.SetPodObjects(uid, nil)
		return
	}
	m.objects.SetPodObjects(uid, PodObjects(pod))
}

// objectChanged marks for remount exactly the pod volumes that project the object, resets
// their backoff and enqueues their pods: a missing object that appears mounts at once.
func (m *Manager) objectChanged(ref ObjectRef) {
	for uid, volumes := range m.records.referring(refKey(ref)) {
		m.markRemount(uid, volumes)
		m.exec.ResetBackoff(uid)
		m.podQueue.Add(uid)
	}
}

// claims caches resolved claims and their volumes, so a pod processed again after each of
// its operations does not GET them every time (upstream #112209). Only a claim that
// resolved is kept, so an unbound or refused one is read again on every retry; the cache
// is emptied every ClaimSyncPeriod (the kubelet reads them again on every pod sync) and an
// entry is dropped when the manager writes the claim. It serves only pods that resolved the
// claim before: a pod setting a claim up for the first time reads it as it is now, as the
// kubelet does, so that it is refused a claim whose deletion began since another pod read it.
type claims struct {
	mu      sync.Mutex
	entries map[string]resolvedClaim
}

type resolvedClaim struct {
	pvc *v1.PersistentVolumeClaim
	pv  *v1.PersistentVolume
}

func newClaims() *claims { return &claims{entries: map[string]resolvedClaim{}} }

func (c *claims) get(namespace, name string) (resolvedClaim, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.entries[namespace+"/"+name]
	return r, ok
}

func (c *claims) put(r resolvedClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[r.pvc.Namespace+"/"+r.pvc.Name] = r
}

func (c *claims) forget(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, namespace+"/"+name)
}

func (c *claims) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}

// fetchClaim returns the claim and its volume, from the cache (if cached) or by GET. A
// claim whose volume grew beyond its status is not cached: the node's part of the expansion
// starts when the resizer hands over, and that is learnt by reading the claim again.
func (m *Manager) fetchClaim(ctx context.Context, namespace, name string, cached bool, check func(resolvedClaim) error) (resolvedClaim, error) {
	if r, ok := m.claims.get(namespace, name); ok && cached {
		if err := check(r); err == nil {
			return r, nil
		}
		m.claims.forget(namespace, name)
	}
	pvc, err := m.objects.GetClaim(ctx, namespace, name)
	if err != nil {
		return resolvedClaim{}, accessError(fmt.Errorf("get PVC %s/%s: %w", namespace, name, err))
	}
	r := resolvedClaim{pvc: pvc}
	if err := check(r); err != nil {
		return r, err
	}
	r.pv, err = m.objects.GetVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return r, accessError(fmt.Errorf("get PV %s: %w", pvc.Spec.VolumeName, err))
	}
	if err := check(r); err != nil {
		return r, err
	}
	if !growing(r) {
		m.claims.put(r)
	}
	return r, nil
}

// growing: the volume is larger than the claim says, an expansion is under way.
func growing(r resolvedClaim) bool {
	want, ok := r.pv.Spec.Capacity[v1.ResourceStorage]
	have := r.pvc.Status.Capacity[v1.ResourceStorage]
	return ok && want.Cmp(have) > 0
}

// accessError marks a Forbidden as not final: a node is refused an object for a moment after
// a pod is bound, until the API server's node graph has seen the pod.
func accessError(err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w (retrying: the node may not be authorized for it yet)", err)
	}
	return err
}

// unresolvedRetry is how soon a pod whose volumes could not all be resolved is processed
// again; zero once they are. Objects without events (claims, volumes) are only learnt by
// reading them again.
func (m *Manager) unresolvedRetry(uid types.UID, unresolved bool) time.Duration {
	if !unresolved {
		m.unresolved.Forget(uid)
		return 0
	}
	return m.unresolved.When(uid)
}

// resizeUnderWay reports whether a claim of the pod is being expanded by the controller:
// its volume grew, and the node's turn comes when the resizer writes the claim's status,
// which is learnt only by reading the claim again. An expansion found infeasible waits for
// the next claim sync instead.
func (m *Manager) resizeUnderWay(uid types.UID) bool {
	for _, dv := range m.dsw.PodVolumes(uid) {
		if dv.Claim == nil || dv.Spec.PersistentVolume == nil || nodeTurn(&dv.Claim.Status) {
			continue
		}
		switch dv.Claim.Status.AllocatedResourceStatuses[v1.ResourceStorage] {
		case "", v1.PersistentVolumeClaimControllerResizeInProgress:
			if growing(resolvedClaim{pvc: dv.Claim, pv: dv.Spec.PersistentVolume}) {
				return true
			}
		}
	}
	return false
}

func newUnresolvedLimiter() workqueue.TypedRateLimiter[types.UID] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](claimBackoff.base, claimBackoff.max)
}

// syncClaims empties the claim cache and processes every pod with a claim again, every
// ClaimSyncPeriod: how a node learns that a claim's volume grew.
func (m *Manager) syncClaims(context.Context) {
	m.claims.clear()
	for _, uid := range m.dsw.PodUIDs() {
		if m.records.hasClaims(uid) {
			m.podQueue.Add(uid)
		}
	}
}

// watchesCollector exports the number of watches the source holds.
type watchesCollector struct {
	src  objectWatcher
	desc *prometheus.Desc
}

func newWatchesCollector(src objectWatcher) *watchesCollector {
	return &watchesCollector{src: src, desc: prometheus.NewDesc("volume_manager_object_watches",
		"Number of single-object watches the volume manager holds, per kind: the distinct ConfigMaps and Secrets that the volumes of the node's pods project.",
		[]string{"kind"}, nil)}
}

func (c *watchesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *watchesCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, n := range c.src.Watches() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(kind))
	}
}

// hasClaims reports whether the pod's volumes refer to a claim.
func (rs *podRecords) hasClaims(uid types.UID) (found bool) {
	rs.with(uid, func(r *podRecord) {
		for _, vr := range r.refs {
			found = found || strings.HasPrefix(vr.ref, "pvc/")
		}
	})
	return found
}
