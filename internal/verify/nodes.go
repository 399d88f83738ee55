package verify

import (
	"os"
	"path/filepath"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/pkg/volume"
)

// The several-node cases (cases_move.go, cases_rwx.go, cases_outofservice.go) run pods on
// the run's node and on other nodes of a `kubevol up --nodes N` of this machine, whose node
// agents keep their pods under <dir>/nodes/<name>/node (docs/up.md), and read the data
// through each node's mount paths.

// onNode pins a pod to a node.
func onNode(node string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node} }
}

// nodeRoot is the node agent's root directory of node on this machine, or "".
func (k *caseEnv) nodeRoot(node string) string {
	if k.root == "" {
		return ""
	}
	if node == k.node {
		return k.root
	}
	dir := filepath.Join(k.o.Dir, "nodes", node, "node")
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir
	}
	return ""
}

// otherHostNodes are n nodes other than the run's on which the driver is registered and
// whose node agents run on this machine, by name; fewer is why a case does not apply.
func (k *caseEnv) otherHostNodes(n int) ([]string, error) {
	list, err := k.cs.StorageV1().CSINodes().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	registered := 0
	for _, cn := range list.Items {
		if !slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == k.driver }) {
			continue
		}
		registered++
		if cn.Name != k.node && k.nodeRoot(cn.Name) != "" {
			out = append(out, cn.Name)
		}
	}
	sort.Strings(out)
	if len(out) < n {
		if registered <= n {
			return nil, skip("the driver is registered on %d node(s); the case needs %d (kubevol up --nodes %d)", registered, n+1, n+1)
		}
		return nil, skip("the driver's other nodes are not kubevol up nodes of this machine (no %s): their mounts cannot be read", filepath.Join(k.o.Dir, "nodes", "<name>", "node"))
	}
	return out[:n], nil
}

// reachableFrom says, as a reason not to apply, that a PV's node affinity excludes node: the
// class's volumes are local to a node, and cannot move or be shared with another.
func (k *caseEnv) reachableFrom(pv *corev1.PersistentVolume, node string) error {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	n, err := k.cs.CoreV1().Nodes().Get(k.ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ok, err := corev1helpers.MatchNodeSelectorTerms(n, pv.Spec.NodeAffinity.Required)
	if err != nil {
		return err
	}
	if !ok {
		return skip("the class's volumes are local to one node: PV %s's node affinity excludes node %s (give a class of network volumes, such as kubevol up's kubevol-network)", pv.Name, node)
	}
	return nil
}

// mountPathOn is where the node agent of root mounted a claim's PV for the pod.
func mountPathOn(root string, pod *corev1.Pod, pv string) string {
	return filepath.Join(volume.Paths{Root: root}.PodVolumeDir(pod.UID, "kubernetes.io/csi", pv), "mount")
}

// stagingPathOn is the staging path of a PV on the node agent of root (stagingPath's layout).
func (k *caseEnv) stagingPathOn(root string, pv *corev1.PersistentVolume) string {
	rel, err := filepath.Rel(k.root, k.stagingPath(pv))
	if err != nil {
		return ""
	}
	return filepath.Join(root, rel)
}

// attachmentOn is the VolumeAttachment of a PV to node, or nil.
func (k *caseEnv) attachmentOn(pv, node string) (*storagev1.VolumeAttachment, error) {
	list, err := k.cs.StorageV1().VolumeAttachments().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, va := range list.Items {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv && va.Spec.NodeName == node {
			return &va, nil
		}
	}
	return nil, nil
}

// claimOn makes a filesystem claim of access mode on the WaitForFirstConsumer class, mounts
// it in a pod pinned to node and returns the pod and the PV, or why the class's volumes
// cannot be used on every node of nodes.
func (k *caseEnv) claimOn(claim string, access corev1.PersistentVolumeAccessMode, pod, node string, nodes ...string) (*corev1.Pod, *corev1.PersistentVolume, error) {
	if _, err := k.claim(claim, classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, access, nil); err != nil {
		return nil, nil, err
	}
	p, err := k.runPod(pod, []corev1.Volume{kubecheck.ClaimVolume("data", claim)}, nil, onNode(node))
	if err != nil {
		return nil, nil, err
	}
	pv, err := k.boundPV(claim)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range nodes {
		if err := k.reachableFrom(pv, n); err != nil {
			return nil, nil, err
		}
	}
	return p, pv, nil
}
