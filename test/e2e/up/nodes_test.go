package up

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/cluster/proc"
	"github.com/kubevol/kubevol/internal/component/driver"
)

// TestUpNodes: `kubevol up --nodes 3` runs three Ready Nodes, each with its own node agent
// (its own node certificate) and the built-in driver on its CSINode under its own node ID
// and topology segment; a WaitForFirstConsumer claim of a pod pinned to the second node is
// provisioned in that node's segment and mounted under that node's root directory only.
// An external driver given as --driver unix:///…/{node}.sock runs one node instance per
// node, as docs/up.md tells a driver author: each registers with its own node, under its
// own node ID, and a pod on the third node mounts its volume there.
// SIGINT, once the pods and claims are gone, leaves no process, mount or loop device.
func TestUpNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kubevol up needs root (mounts); run the tests as root")
	}
	bin := kubevolBinary(t)
	dir, ext := t.TempDir(), t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir); unmountUnder(t, ext) })
	const extDriver = "nodes.ext.kubevol.io"
	extSock := func(node string) string { return "unix://" + filepath.Join(ext, node+".sock") }
	for i, n := range []string{"n", "n-2", "n-3"} {
		args := []string{"driver", "--drivername", extDriver, "--endpoint", extSock(n), "--node-id", n, "--state-dir", filepath.Join(ext, n)}
		if i == 0 {
			args = append(args, "--topology-nodes", "n-2,n-3")
		} else {
			args = append(args, "--mode", "node", "--controller-state-dir", filepath.Join(ext, "n"))
		}
		startProc(t, "ext-"+n, bin, args...)
	}
	start := time.Now()
	r := startUp(t, bin, "--dir", dir, "--node-name", "n", "--nodes", "3", "--status-interval", "500ms", "--driver", extSock("{node}"))
	t.Logf("kubevol up --nodes 3 ready in %s", time.Since(start).Round(time.Millisecond))
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := []string{"n", "n-2", "n-3"}
	roots := []string{filepath.Join(dir, "node"), filepath.Join(dir, "nodes", "n-2", "node"), filepath.Join(dir, "nodes", "n-3", "node")}

	step := time.Now()
	waitNodes(t, ctx, cs, nodes)
	t.Logf("3 Nodes Ready with the driver on their CSINodes after %s more", time.Since(step).Round(time.Millisecond))
	if time.Since(step) > 10*time.Second {
		// Not a failure, but worth a look: a driver's registration was retried.
		for _, log := range []string{"kubevol-node", "kubevol-node-n-2", "kubevol-node-n-3"} {
			t.Logf("%s:\n%s", log, proc.LogTail(filepath.Join(dir, "logs", log+".log"), 12))
		}
	}
	// Each agent is its node, with the certificate it obtained through its own CSR.
	for i, name := range nodes {
		assertNodeCredential(ctx, t, filepath.Join(filepath.Dir(roots[i]), "node.kubeconfig"), name)
	}
	// The external driver's node instances, each on its node under its own node ID.
	for _, name := range nodes {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cn, err := cs.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == extDriver && d.NodeID == name }), nil
		})
		if err != nil {
			t.Errorf("CSINode %s does not list %s under node ID %s: %v", name, extDriver, name, err)
		}
	}
	if t.Failed() {
		return
	}

	step = time.Now()
	pod := runPodOn(t, ctx, cs, "default", "on-n2", "kubevol-local", nodes[1])
	if t.Failed() {
		return
	}
	t.Logf("claim of a pod pinned to %s provisioned and mounted in %s", nodes[1], time.Since(step).Round(time.Millisecond))
	pvc, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "on-n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pvSegments(pv); !slices.Equal(got, []string{nodes[1]}) {
		t.Errorf("PV %s: nodeAffinity %s in %v, want [%s]", pv.Name, driver.TopologyKey, got, nodes[1])
	}
	if pod.Spec.NodeName != nodes[1] {
		t.Errorf("pod on %q, want %s", pod.Spec.NodeName, nodes[1])
	}
	want := filepath.Join(roots[1], "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv.Name, "mount")
	// The claim is the only CSI volume: its staging and its publish are all there is.
	if got := csiMounts(dir); !slices.Contains(got, want) || len(got) != 2 {
		t.Errorf("CSI mounts: %v, want %s and its staging", got, want)
	} else {
		for _, m := range got {
			if !strings.HasPrefix(m, roots[1]+"/") {
				t.Errorf("%s of node %s is mounted outside its root dir: %s", pv.Name, nodes[1], m)
			}
		}
	}

	extPod := runPodOn(t, ctx, cs, "default", "ext-on-n3", extDriver, nodes[2])
	if t.Failed() {
		return
	}
	if got := csiMounts(dir); !slices.ContainsFunc(got, func(m string) bool {
		return strings.HasPrefix(m, filepath.Join(roots[2], "pods", string(extPod.UID))+"/")
	}) {
		t.Errorf("CSI mounts %v: none of pod %s under node %s's root", got, extPod.Name, nodes[2])
	}

	// Pods and claims go first, so that nothing stays mounted once up stops.
	step = time.Now()
	for _, p := range []string{pod.Name, extPod.Name} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().PersistentVolumeClaims("default").Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err != nil && len(csiMounts(dir)) == 0, nil
	})
	if err != nil {
		t.Errorf("PV %s or its mounts still there after the pod and claim were deleted: %v", pv.Name, err)
	}
	t.Logf("pod and claim deleted, volume unmounted and gone in %s", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	pids := descendants(r.cmd.Process.Pid)
	r.interrupt(t)
	t.Logf("SIGINT to exit in %s", time.Since(step).Round(time.Millisecond))
	assertNothingLeft(t, pids, dir)
}

// waitNodes waits until every node is Ready, labelled with its topology segment, and has
// the built-in driver on its CSINode under its own node ID and the driver's topology key.
func waitNodes(t *testing.T, ctx context.Context, cs kubernetes.Interface, names []string) {
	t.Helper()
	var last string
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			if p := nodeProblem(ctx, cs, name); p != "" {
				if p != last {
					t.Logf("%s: %s", time.Since(start).Round(time.Millisecond), p)
				}
				last = p
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("nodes %v: %v (last: %s)", names, err, last)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != len(names) {
		t.Errorf("the cluster has %d Nodes, want %d (%v)", len(list.Items), len(names), err)
	}
}

// nodeProblem says what keeps node from being a Ready node of the driver, or "".
func nodeProblem(ctx context.Context, cs kubernetes.Interface, name string) string {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}) {
		return "node " + name + " not Ready"
	}
	if v := n.Labels[driver.TopologyKey]; v != name {
		return fmt.Sprintf("node %s labelled %s=%q", name, driver.TopologyKey, v)
	}
	csiNode, err := cs.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver.DefaultDriverName })
	if i < 0 {
		return "CSINode " + name + " has no " + driver.DefaultDriverName
	}
	if d := csiNode.Spec.Drivers[i]; d.NodeID != name || !slices.Equal(d.TopologyKeys, []string{driver.TopologyKey}) {
		return fmt.Sprintf("CSINode %s: node ID %q, topology keys %v", name, d.NodeID, d.TopologyKeys)
	}
	return ""
}

// pvSegments are the values of the driver's topology key the PV's node affinity requires.
func pvSegments(pv *corev1.PersistentVolume) []string {
	var out []string
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == driver.TopologyKey && e.Operator == corev1.NodeSelectorOpIn {
				out = append(out, e.Values...)
			}
		}
	}
	return out
}

// csiMounts are the mount points of CSI volumes under dir, staging and publish, in the
// kubelet's layout of every node's root dir.
func csiMounts(dir string) []string {
	mis, _ := mount.ParseMountInfo("/proc/self/mountinfo")
	var out []string
	for _, mi := range mis {
		p := mi.MountPoint
		if strings.HasPrefix(p, dir+"/") && (strings.Contains(p, "/volumes/kubernetes.io~csi/") || strings.Contains(p, "/plugins/kubernetes.io/csi/")) {
			out = append(out, mi.MountPoint)
		}
	}
	return out
}
