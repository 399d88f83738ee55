package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// localClaim creates a local PV at path, pinned by node affinity to host and with the access
// mode mode, and a claim bound to it (kube-controller-manager binds them).
func (a *agent) localClaim(t *testing.T, path string, affinity *corev1.VolumeNodeAffinity, mode corev1.PersistentVolumeAccessMode) string {
	t.Helper()
	return a.localClaimOf(t, path, affinity, mode, corev1.PersistentVolumeFilesystem)
}

// localClaimOf is localClaim with the PV's and the claim's volumeMode.
func (a *agent) localClaimOf(t *testing.T, path string, affinity *corev1.VolumeNodeAffinity, mode corev1.PersistentVolumeAccessMode, volumeMode corev1.PersistentVolumeMode) string {
	t.Helper()
	ctx := a.ctx(time.Minute)
	name := "local-" + rand.String(6)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{mode},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              "",
		PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
		NodeAffinity:                  affinity,
		VolumeMode:                    &volumeMode,
	}}
	_, err := a.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	mustf(t, err, "create PV")
	t.Cleanup(func() {
		_ = a.client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	_, err = a.client.CoreV1().PersistentVolumeClaims(a.ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode}, VolumeName: name, StorageClassName: ptr.To(""), VolumeMode: &volumeMode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}, metav1.CreateOptions{})
	mustf(t, err, "create PVC")
	return name
}

func labelAffinity(key, value string) *corev1.VolumeNodeAffinity {
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}},
	}}}}
}

// onNode binds the pod to the agent's node directly, as upstream's e2e tests do to get past
// the scheduler's own checks (RWOP, node affinity, huge pages the Node does not offer).
func (a *agent) onNode(p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeSelector = nil
	p.Spec.NodeName = a.name
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	return p
}

// A local PV mounts for a pod; a second pod on a ReadWriteOncePod volume is refused with the
// kubelet's message until the first is gone; a PV whose node affinity excludes the node is
// refused before mount, and mounts once the node has the label (the node's labels are read
// again for each try).
func TestLocalVolumeRWOPAndNodeAffinity(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	ctx := a.ctx(3 * time.Minute)
	dir := filepath.Join(a.root, "disks", "d1")
	mustf(t, os.MkdirAll(dir, 0o755), "mkdir")
	mustf(t, os.WriteFile(filepath.Join(dir, "data"), []byte("local data"), 0o644), "write")
	claim := a.localClaim(t, dir, labelAffinity(corev1.LabelHostname, a.name), corev1.ReadWriteOncePod)

	p1 := a.create(a.onNode(a.pod("rwop-1", kubecheck.ClaimVolume("v", claim))))
	p1 = a.waitPod(p1.Name, time.Minute, "local volume ready", volumesReady)
	if got := readFile(t, filepath.Join(a.volumeDir(p1, "kubernetes.io~local-volume", claim), "data")); got != "local data" {
		t.Fatalf("pod sees %q in the local volume", got)
	}
	p2 := a.create(a.onNode(a.pod("rwop-2", kubecheck.ClaimVolume("v", claim))))
	a.waitEvent(p2.Name, "FailedMount", "volume uses the ReadWriteOncePod access mode and is already in use by another pod", time.Minute)
	if condition(a.waitPod(p2.Name, 5*time.Second, "volumes not ready", func(p *corev1.Pod) bool { return condition(p) != "" })) == corev1.ConditionTrue {
		t.Fatal("second pod of a ReadWriteOncePod volume has its volumes ready")
	}
	mustf(t, a.client.CoreV1().Pods(a.ns).Delete(ctx, p1.Name, metav1.DeleteOptions{}), "delete first pod")
	a.waitGone(p1.Name, time.Minute)
	p2 = a.waitPod(p2.Name, 3*time.Minute, "volumes ready once the first pod is gone", volumesReady)
	if got := readFile(t, filepath.Join(a.volumeDir(p2, "kubernetes.io~local-volume", claim), "data")); got != "local data" {
		t.Fatalf("second pod sees %q", got)
	}

	// Node affinity the node does not match: refused before anything is mounted.
	dir2 := filepath.Join(a.root, "disks", "d2")
	mustf(t, os.MkdirAll(dir2, 0o755), "mkdir")
	other := a.localClaim(t, dir2, labelAffinity("kubevol.io/test-disk", "fast"), corev1.ReadWriteOnce)
	p3 := a.create(a.onNode(a.pod("affinity", kubecheck.ClaimVolume("v", other))))
	a.waitEvent(p3.Name, "FailedMount", "MountVolume.NodeAffinity check failed", time.Minute)
	a.waitEvent(p3.Name, "FailedMount", "no matching NodeSelectorTerms", time.Second)
	if m := kubecheck.MountsUnder(filepath.Join(a.root, "pods", string(p3.UID))); len(m) != 0 {
		t.Fatalf("mounted despite the node affinity: %v", m)
	}
	_, err := a.client.CoreV1().Nodes().Patch(ctx, a.name, types.MergePatchType, []byte(`{"metadata":{"labels":{"kubevol.io/test-disk":"fast"}}}`), metav1.PatchOptions{})
	mustf(t, err, "label the node")
	a.waitPod(p3.Name, 3*time.Minute, "volumes ready once the affinity names the node", volumesReady)
}

// An image volume is the runtime's to mount: the pod's volumes are ready at once (the node
// has nothing to set up). A HugePages emptyDir is a hugetlbfs of the requested page size.
func TestImageAndHugePagesVolumes(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	img := a.create(a.onNode(a.pod("image", corev1.Volume{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
		Reference: "registry.k8s.io/pause:3.10", PullPolicy: corev1.PullIfNotPresent}}})))
	a.waitPod(img.Name, time.Minute, "image volume ready", volumesReady)

	hp := a.onNode(a.pod("hugepages", corev1.Volume{Name: "hp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}}}))
	res := corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	hp.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: res, Limits: res}
	hp = a.create(hp)
	hp = a.waitPod(hp.Name, time.Minute, "hugepages emptyDir ready", volumesReady)
	dir := a.volumeDir(hp, "kubernetes.io~empty-dir", "hp")
	line := mountLine(t, dir)
	if !strings.Contains(line, " - hugetlbfs ") || !strings.Contains(line, "pagesize=2M") {
		t.Fatalf("mount of %s: %q, want hugetlbfs with pagesize=2M", dir, line)
	}
}

// mountLine is the mountinfo line of the mount point dir.
func mountLine(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	mustf(t, err, "mountinfo")
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return l
		}
	}
	return ""
}
