package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/pkg/volume"
)

// waitTimeout bounds one wait of a case; the case's own timeout bounds the whole.
const waitTimeout = 2 * time.Minute

// caseEnv is one case's namespace and what it created there.
type caseEnv struct {
	*env
	ctx context.Context
	ns  string
}

func (e *env) newCaseEnv(ctx context.Context, name string) (*caseEnv, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "verify-" + strings.ReplaceAll(name, "/", "-") + "-" + rand.String(5),
		Labels: map[string]string{runLabel: e.runID},
	}}
	if len(ns.Name) > 63 {
		ns.Name = ns.Name[:57] + rand.String(6)
	}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	return &caseEnv{env: e, ctx: ctx, ns: ns.Name}, nil
}

// claim creates a PVC.
func (k *caseEnv) claim(name, class, size string, mode corev1.PersistentVolumeMode, access corev1.PersistentVolumeAccessMode, source *corev1.TypedLocalObjectReference) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{access},
			StorageClassName: ptr.To(k.classes[class]),
			VolumeMode:       &mode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			DataSource:       source,
		},
	}
	out, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Create(k.ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create claim %s: %w", name, err)
	}
	return out, nil
}

// fsClaim is a ReadWriteOnce filesystem claim of the default size.
func (k *caseEnv) fsClaim(name, class string) (*corev1.PersistentVolumeClaim, error) {
	return k.claim(name, class, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, nil)
}

const defaultSize = "16Mi"

// pod creates a pod on the driver's node that mounts mounts and maps devices; mutate, if
// set, adjusts it first. The node agent sets up its volumes; nothing runs in it.
func (k *caseEnv) pod(name string, mounts, devices []corev1.Volume, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	// Nothing runs in the pod. On a real kubelet the image is never pulled (no image of that
	// name exists, and the node must not reach out for one): the container waits in
	// ErrImageNeverPull, after the kubelet has set up the volumes.
	pod := kubecheck.VolumePod(k.ns, name, k.node, "verify.kubevol.io/none", mounts, devices)
	pod.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	// A grace period of 0 would let the API server delete the pod at once; with the
	// default one the node agent finishes the deletion once the volumes are down.
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	if mutate != nil {
		mutate(pod)
	}
	created, err := kubecheck.CreatePod(k.ctx, k.cs, k.ns, pod, waitTimeout)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.uids = append(k.uids, created.UID)
	k.mu.Unlock()
	return created, nil
}

// ready waits for the node agent to report the pod's volumes set up.
func (k *caseEnv) ready(pod *corev1.Pod) (*corev1.Pod, error) {
	return kubecheck.WaitVolumesUp(k.ctx, k.cs, k.ns, pod.Name, waitTimeout)
}

// runPod creates a pod and waits for its volumes.
func (k *caseEnv) runPod(name string, mounts, devices []corev1.Volume, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	p, err := k.pod(name, mounts, devices, mutate)
	if err != nil {
		return nil, err
	}
	return k.ready(p)
}

// deletePod deletes a pod and waits until the node agent, having torn its volumes down,
// finished the deletion.
func (k *caseEnv) deletePod(name string) error {
	return kubecheck.DeletePod(k.ctx, k.cs, k.ns, name, waitTimeout)
}

// boundPV waits for the claim to be bound and returns its PV.
func (k *caseEnv) boundPV(claim string) (*corev1.PersistentVolume, error) {
	return kubecheck.WaitBound(k.ctx, k.cs, k.ns, claim, waitTimeout)
}

// waitPVGone waits for a PV to be deleted (and so its volume, by the provisioner).
func (k *caseEnv) waitPVGone(name string) error {
	return kubecheck.WaitPVGone(k.ctx, k.cs, name, waitTimeout)
}

// deleteClaim deletes a claim and, for reclaim policy Delete, waits for its PV to go.
func (k *caseEnv) deleteClaim(name string) error {
	pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(k.ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Delete(k.ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if pvc.Spec.VolumeName == "" {
		return nil
	}
	return k.waitPVGone(pvc.Spec.VolumeName)
}

// expand asks for a bigger claim.
func (k *caseEnv) expand(claim, size string) error {
	return kubecheck.RequestSize(k.ctx, k.cs, k.ns, claim, size)
}

// waitCapacity waits for the claim's status.capacity to reach size with no resize left.
func (k *caseEnv) waitCapacity(claim, size string) error {
	last, err := kubecheck.WaitForClaim(k.ctx, k.cs, k.ns, claim, waitTimeout, kubecheck.Expanded(size))
	if err != nil {
		return fmt.Errorf("claim %s not expanded to %s: %w (last: %s)", claim, size, err, kubecheck.DescribeResize(last))
	}
	return nil
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// mountPath is where the node agent mounted a claim's PV for the pod, in the kubelet's layout.
func (k *caseEnv) mountPath(pod *corev1.Pod, pv string) string {
	return filepath.Join(volume.Paths{Root: k.root}.PodVolumeDir(pod.UID, "kubernetes.io/csi", pv), "mount")
}

// devicePath is the pod's link to a raw block PV.
func (k *caseEnv) devicePath(pod *corev1.Pod, pv string) string {
	return filepath.Join(k.root, "pods", string(pod.UID), "volumeDevices", "kubernetes.io~csi", pv)
}

// claimPath is the mount of the claim's volume in the pod.
func (k *caseEnv) claimPath(pod *corev1.Pod, claim string) (string, error) {
	pv, err := k.boundPV(claim)
	if err != nil {
		return "", err
	}
	return k.mountPath(pod, pv.Name), nil
}

// writeProof writes a file unique to the case through the mount.
func (k *caseEnv) writeProof(dir string) (string, error) {
	data := "written by kubevol verify in " + k.ns + "\n"
	if err := os.WriteFile(filepath.Join(dir, "proof.txt"), []byte(data), 0o644); err != nil {
		return "", fmt.Errorf("write through the mount path: %w", err)
	}
	return data, nil
}

func readProof(dir, want string) error {
	got, err := os.ReadFile(filepath.Join(dir, "proof.txt"))
	if err != nil {
		return fmt.Errorf("read back through the mount path: %w", err)
	}
	if string(got) != want {
		return fmt.Errorf("read back %q through the mount path, want %q", got, want)
	}
	return nil
}

// cleanup removes what the case made, in the order Kubernetes needs: pods (so volumes are
// unmounted), snapshots, claims (so PVs and volumes are deleted, Retain ones too), then the
// namespace. It never removes anything outside the case's namespace but the PVs bound to
// its claims.
func (k *caseEnv) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k.ctx = ctx
	var errs []error
	pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			if err := k.deletePod(p.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := k.deleteSnapshots(); err != nil {
		errs = append(errs, err)
	}
	pvcs, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, c := range pvcs.Items {
			if c.Spec.VolumeName != "" {
				if err := k.deleteRetained(c.Spec.VolumeName); err != nil {
					errs = append(errs, err)
				}
			}
			if err := k.deleteClaim(c.Name); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := k.cs.CoreV1().Namespaces().Delete(ctx, k.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deleteRetained switches a Retain PV of the case to Delete, so that the provisioner deletes
// its volume through the driver once the claim is gone.
func (k *caseEnv) deleteRetained(pvName string) error {
	pv, err := k.cs.CoreV1().PersistentVolumes().Get(k.ctx, pvName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	// Only a volume provisioned for a claim of this case's namespace is ours to delete.
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != k.ns {
		return fmt.Errorf("PersistentVolume %s is not bound to a claim of namespace %s: kept", pvName, k.ns)
	}
	patch := []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`)
	_, err = k.cs.CoreV1().PersistentVolumes().Patch(k.ctx, pvName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
