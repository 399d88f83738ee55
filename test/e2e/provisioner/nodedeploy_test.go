package provisioner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

const annSelectedNode = "volume.kubernetes.io/selected-node"

// upstream's distributed deploy: one provisioner per node beside a node-local driver,
// with --node-deployment and no leader election. Each claim is provisioned by the
// instance of its selected node only, and an Immediate claim is taken by exactly one.
func TestNodeDeployment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noProv: true, driverArgs: []string{"--mode", "all"}})
	nodeB := e.node + "-b"
	framework.CreateNode(e.ctx, t, e.cs, nodeB, e.driver)
	drvB := framework.StartControllerDriver(e.ctx, t, drivertest.TempDir(t), e.driver, nodeB, "--mode", "all")

	nodeArgs := func(node, socket string) []string {
		args := []string{}
		for i := 0; i < len(e.provArgs); i++ {
			switch e.provArgs[i] {
			case "--csi-address":
				args = append(args, "--csi-address", socket)
				i++
			case "--http-endpoint":
				args = append(args, "--http-endpoint", framework.FreeAddr(t))
				i++
			default:
				args = append(args, e.provArgs[i])
			}
		}
		return append(args, "--node-deployment=true", "--node-name", node, "--strict-topology=true", "--immediate-topology=false",
			"--node-deployment-base-delay=500ms", "--node-deployment-max-delay=2s")
	}
	framework.StartKubevol(t, nodeArgs(e.node, e.socket)...)
	framework.StartKubevol(t, nodeArgs(nodeB, drvB.Endpoint)...)

	late := storagev1.VolumeBindingWaitForFirstConsumer
	lateClass := e.class(func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = &late })
	immClass := e.class(nil)
	onNode := func(node string) func(*corev1.PersistentVolumeClaim) {
		return func(pvc *corev1.PersistentVolumeClaim) { pvc.Annotations = map[string]string{annSelectedNode: node} }
	}
	e.createClaim(claimSpec("on-a", lateClass.Name, "8Mi", onNode(e.node)))
	e.createClaim(claimSpec("on-b", lateClass.Name, "8Mi", onNode(nodeB)))
	e.createClaim(claimSpec("immediate", immClass.Name, "8Mi", nil))

	for claim, node := range map[string]string{"on-a": e.node, "on-b": nodeB} {
		_, pv := e.waitBound(claim, 2*time.Minute)
		if id := pv.Spec.CSI.VolumeAttributes["storage.kubernetes.io/csiProvisionerIdentity"]; !strings.HasSuffix(id, "-"+node) {
			t.Errorf("claim %s of node %s was provisioned by %q", claim, node, id)
		}
		if got := affinityNode(pv); got != node {
			t.Errorf("claim %s: PV is on node %q, want %s", claim, got, node)
		}
	}
	pvc, pv := e.waitBound("immediate", 2*time.Minute)
	winner := pvc.Annotations[annSelectedNode]
	if winner != e.node && winner != nodeB {
		t.Fatalf("immediate claim: selected-node %q, want one of the two nodes", winner)
	}
	if got := affinityNode(pv); got != winner {
		t.Errorf("immediate claim taken by %s but its PV is on %q", winner, got)
	}
	// Each driver holds only its node's volumes: nothing was created twice.
	wantA := 1
	if winner == e.node {
		wantA = 2
	}
	e.waitVolumes(wantA, time.Minute)
	// Deleting a claim deletes its volume through its own node's instance.
	e.deleteClaim("on-b")
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rsp, err := drvB.Conn.Controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
		if err != nil {
			return false, nil
		}
		return len(rsp.GetEntries()) == 3-wantA-1, nil
	})
	fatalIf(t, err, "node-b's volume of the deleted claim was not deleted")
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(e.ctx, "on-a", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}

// affinityNode is the one node value of the PV's required node affinity.
func affinityNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == topologyKey && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}
