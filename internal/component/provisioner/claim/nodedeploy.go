package claim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// NodeDeployment is external-provisioner's --node-deployment: one provisioner per node,
// beside a node-local driver, that provisions only the claims whose selected-node is its
// node, and (with ImmediateBinding) races the other instances for Immediate claims.
type NodeDeployment struct {
	NodeName string
	// Topology is the node's segment from the driver's NodeGetInfo (nil without topology).
	Topology         map[string]string
	ImmediateBinding bool
	// BaseDelay and MaxDelay bound the jittered, per-claim exponential wait before an
	// instance tries to take an Immediate claim, so that the instances do not all write
	// the claim at once.
	BaseDelay, MaxDelay time.Duration
}

// ownerRace remembers, per Immediate claim, how often this instance tried to take it and
// when it may try next. The wait is a queue delay, not a sleeping worker.
type ownerRace struct {
	mu       sync.Mutex
	attempts map[types.UID]int
	due      map[types.UID]time.Time
	now      func() time.Time
	jitter   func(time.Duration) time.Duration
}

func newOwnerRace() *ownerRace {
	return &ownerRace{attempts: map[types.UID]int{}, due: map[types.UID]time.Time{}, now: time.Now,
		jitter: func(d time.Duration) time.Duration { return rand.N(d/2 + 1) }}
}

// delay is base·2^attempts plus up to half of that in jitter, never above max.
func (r *ownerRace) delay(nd *NodeDeployment, uid types.UID) time.Duration {
	d := nd.BaseDelay
	for i := 0; i < r.attempts[uid] && d < nd.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, nd.MaxDelay)
	return min(d+r.jitter(d), max(nd.MaxDelay, nd.BaseDelay))
}

// wait reports how long to wait before the next attempt on uid; zero means try now.
func (r *ownerRace) wait(nd *NodeDeployment, uid types.UID) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	due, ok := r.due[uid]
	if !ok {
		d := r.delay(nd, uid)
		r.due[uid] = r.now().Add(d)
		return d
	}
	if left := due.Sub(r.now()); left > 0 {
		return left
	}
	delete(r.due, uid)
	r.attempts[uid]++
	return 0
}

func (r *ownerRace) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.attempts, uid)
	delete(r.due, uid)
}

// checkNode says whether this instance provisions claim now (upstream checkNode). Without
// a node deployment every claim is ours. An Immediate claim nobody took yet may be taken:
// the instance waits its delay, then writes its node into selected-node, and provisions
// when that update comes back through the informer.
func (c *Controller) checkNode(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) (bool, error) {
	nd := c.cfg.Node
	if nd == nil {
		return true, nil
	}
	switch claim.Annotations[pvspec.AnnSelectedNode] {
	case nd.NodeName:
		c.race.forget(claim.UID)
		return true, nil
	case "":
	default:
		c.race.forget(claim.UID)
		return false, nil // another node's claim
	}
	if class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingImmediate || !nd.ImmediateBinding {
		return false, nil
	}
	if len(class.AllowedTopologies) > 0 && c.topology && !topologyAllows(class.AllowedTopologies, nd.Topology) {
		klog.FromContext(ctx).V(5).Info("Not taking the claim: its StorageClass's allowedTopologies exclude this node", "node", nd.NodeName)
		return false, nil
	}
	if d := c.race.wait(nd, claim.UID); d > 0 {
		return false, controller.RetryAfter(d)
	}
	return false, c.becomeOwner(ctx, claim)
}

// becomeOwner writes this node into the claim's selected-node, unless another instance
// was faster. It writes with Update, the verb upstream's RBAC grants on claims, so that a
// concurrent winner makes it fail with a conflict instead of being overwritten.
func (c *Controller) becomeOwner(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	nd, logger := c.cfg.Node, klog.FromContext(ctx)
	cur, err := c.claimsLister().PersistentVolumeClaims(claim.Namespace).Get(claim.Name)
	if apierrors.IsNotFound(err) {
		c.race.forget(claim.UID)
		return nil
	} else if err != nil {
		return err
	}
	if cur.UID != claim.UID || cur.Spec.VolumeName != "" || cur.Annotations[pvspec.AnnSelectedNode] != "" {
		c.race.forget(claim.UID) // someone else took it (or it is bound)
		return nil
	}
	cur = cur.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[pvspec.AnnSelectedNode] = nd.NodeName
	_, err = c.claimWriter().Write(ctx, claim, cur)
	switch {
	case apierrors.IsConflict(err):
		// Lost the race or another write: look again after a longer delay.
		logger.V(3).Info("Conflict while taking the claim for this node; will look again", "node", nd.NodeName)
		return controller.RetryAfter(c.race.wait(nd, claim.UID))
	case apierrors.IsNotFound(err):
		c.race.forget(claim.UID)
		return nil
	case err != nil:
		return fmt.Errorf("selecting node %q for the claim: %w", nd.NodeName, err)
	}
	c.race.forget(claim.UID)
	logger.V(2).Info("Took the Immediate claim for this node", "node", nd.NodeName)
	return nil
}

// topologyAllows: some term of allowedTopologies matches the node's segment (each of its
// expressions names a key the segment has, with one of the listed values).
func topologyAllows(terms []corev1.TopologySelectorTerm, seg map[string]string) bool {
	return slices.ContainsFunc(terms, func(t corev1.TopologySelectorTerm) bool {
		for _, e := range t.MatchLabelExpressions {
			v, ok := seg[e.Key]
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		}
		return true
	})
}
