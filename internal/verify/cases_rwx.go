package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// rwxNodes: a ReadWriteMany volume mounted at once by pods on two nodes (upstream's
// multiVolume "should concurrently access the single volume from pods on different node"):
// a write through each node's mount is read through the other's while both are mounted,
// and deleting one pod keeps the other's mount. Not applicable when the driver refuses a
// ReadWriteMany claim (INVALID_ARGUMENT, as CSI asks of an unsupported access mode) or its
// volumes are local to one node.
func rwxNodes(k *caseEnv) error {
	others, err := k.otherHostNodes(1)
	if err != nil {
		return err
	}
	a, b := k.node, others[0]
	if _, err := k.claim("data", classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany, nil); err != nil {
		return err
	}
	vols := []corev1.Volume{kubecheck.ClaimVolume("data", "data")}
	pa, err := k.pod("on-a", vols, nil, onNode(a))
	if err != nil {
		return err
	}
	if err := k.provisionedOrRefused("data"); err != nil {
		return err
	}
	if pa, err = k.ready(pa); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.reachableFrom(pv, b); err != nil {
		return err
	}
	pb, err := k.runPod("on-b", vols, nil, onNode(b))
	if err != nil {
		return err
	}
	dirA, dirB := mountPathOn(k.nodeRoot(a), pa, pv.Name), mountPathOn(k.nodeRoot(b), pb, pv.Name)
	for _, w := range []struct{ from, to, name string }{{dirA, dirB, "a"}, {dirB, dirA, "b"}} {
		data := fmt.Sprintf("written on node %s's mount in %s\n", w.name, k.ns)
		if err := os.WriteFile(filepath.Join(w.from, "from-"+w.name), []byte(data), 0o644); err != nil {
			return fmt.Errorf("write through pod on-%s's mount: %w", w.name, err)
		}
		got, err := os.ReadFile(filepath.Join(w.to, "from-"+w.name))
		if err != nil || string(got) != data {
			return fmt.Errorf("the other node's mount does not show pod on-%s's write: %q, %v", w.name, got, err)
		}
	}
	if err := k.deletePod("on-a"); err != nil {
		return err
	}
	if !isMountPoint(dirB) {
		return fmt.Errorf("pod on-b's mount %s went with pod on-a on the other node", dirB)
	}
	if got, err := os.ReadFile(filepath.Join(dirB, "from-a")); err != nil || !strings.Contains(string(got), "node a") {
		return fmt.Errorf("after pod on-a was deleted, node %s reads %q, %v", b, got, err)
	}
	return nil
}

// provisionedOrRefused waits for a claim to be bound; a ProvisioningFailed event with
// INVALID_ARGUMENT, the driver's answer to an access mode it does not offer, makes the
// case not applicable.
func (k *caseEnv) provisionedOrRefused(claim string) error {
	var refused string
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if err == nil && pvc.Status.Phase == corev1.ClaimBound {
			return true, nil
		}
		refused = k.provisioningRefusal(ctx, claim)
		return refused != "", nil
	})
	if err != nil {
		return fmt.Errorf("claim %s not bound: %w", claim, err)
	}
	if refused != "" {
		return skip("the driver refuses a ReadWriteMany claim: %s", refused)
	}
	return nil
}

// provisioningRefusal is the message of a ProvisioningFailed event of the claim with
// INVALID_ARGUMENT, CSI's answer to what a driver does not offer, or "".
func (k *caseEnv) provisioningRefusal(ctx context.Context, claim string) string {
	evs, err := k.cs.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=ProvisioningFailed"})
	if err != nil {
		return ""
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, "InvalidArgument") {
			return ev.Message
		}
	}
	return ""
}
