package verify

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// provisionImmediate: Immediate binding, restricted to the node's topology segment; the PV
// must carry the segment as node affinity.
func provisionImmediate(k *caseEnv) error {
	if _, err := k.fsClaim("data", classImmediate); err != nil {
		return err
	}
	if err := k.boundInSegment("data"); err != nil {
		return err
	}
	return k.deleteClaim("data")
}

// provisionWFFC: WaitForFirstConsumer binding: the claim stays Pending until a pod uses it,
// then is provisioned on the pod's node.
func provisionWFFC(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	time.Sleep(time.Second) // a wrong Immediate provisioning would bind now
	pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(k.ctx, "data", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pvc.Status.Phase != corev1.ClaimPending {
		return fmt.Errorf("WaitForFirstConsumer claim is %s before any pod uses it", pvc.Status.Phase)
	}
	if _, err := k.runPod("app", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, nil); err != nil {
		return err
	}
	pvc, err = k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(k.ctx, "data", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got := pvc.Annotations["volume.kubernetes.io/selected-node"]; got != k.node {
		return fmt.Errorf("claim's selected-node annotation = %q, want %q", got, k.node)
	}
	if err := k.boundInSegment("data"); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	return k.deleteClaim("data")
}

// boundInSegment waits for the claim's PV and checks that it is in the node's segment.
func (k *caseEnv) boundInSegment(claim string) error {
	pv, err := k.boundPV(claim)
	if err != nil {
		return err
	}
	return k.checkTopology(pv)
}

// checkTopology: a driver with topology keys must give the PV the node's segment, unless
// the PV has no node affinity at all: the driver says the volume is reachable from every
// node (CSI: no accessible_topology), as network storage is, which topology/pinned-away
// and the multinode/ cases check from another node.
func (k *caseEnv) checkTopology(pv *corev1.PersistentVolume) error {
	if len(k.topology) == 0 || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		ok := true
		for key, val := range k.topology {
			found := false
			for _, ex := range term.MatchExpressions {
				if ex.Key == key && ex.Operator == corev1.NodeSelectorOpIn && slices.Contains(ex.Values, val) {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("PV %s node affinity %v does not select the node's topology %v", pv.Name, pv.Spec.NodeAffinity.Required.NodeSelectorTerms, k.topology)
}

// dataPersists: data written through one pod's mount is read back by the next pod.
func dataPersists(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "writer")
	if err != nil {
		return err
	}
	if err := k.deletePod("writer"); err != nil {
		return err
	}
	if isMountPoint(u.dir) {
		return fmt.Errorf("%s is still mounted after its pod was deleted", u.dir)
	}
	return k.reuse(u, "data", "reader")
}
