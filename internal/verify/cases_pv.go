package verify

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// pvFields: the provisioned PV carries what the claim and class asked for (capacity at
// least the request, access modes, reclaim policy, volume mode, class and mount options,
// upstream's provisioning "should provision storage with mount options"), and the mount
// options are on the pod's mount.
func pvFields(k *caseEnv) error {
	const size = "20Mi"
	if _, err := k.claim("data", classOptions, size, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, nil); err != nil {
		return err
	}
	p, err := k.runPod("app", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, nil)
	if err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	want := pvWant{size: resource.MustParse(size), access: corev1.ReadWriteOnce, reclaim: corev1.PersistentVolumeReclaimRetain,
		mode: corev1.PersistentVolumeFilesystem, class: k.classes[classOptions], options: k.o.MountOptions}
	if err := checkPV(pv, want); err != nil {
		return err
	}
	if k.root == "" || len(k.o.MountOptions) == 0 {
		return nil
	}
	path := k.mountPath(p, pv.Name)
	mps, err := mount.New("").List()
	if err != nil {
		return err
	}
	return checkMountOptions(mps, path, k.o.MountOptions)
}

type pvWant struct {
	size    resource.Quantity
	access  corev1.PersistentVolumeAccessMode
	reclaim corev1.PersistentVolumeReclaimPolicy
	mode    corev1.PersistentVolumeMode
	class   string
	options []string
}

// checkPV compares a provisioned PV with what its claim and class asked for.
func checkPV(pv *corev1.PersistentVolume, w pvWant) error {
	var bad []string
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(w.size) < 0 {
		bad = append(bad, fmt.Sprintf("capacity %s below the requested %s", got.String(), w.size.String()))
	}
	if !slices.Equal(pv.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{w.access}) {
		bad = append(bad, fmt.Sprintf("access modes %v, want [%s]", pv.Spec.AccessModes, w.access))
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != w.reclaim {
		bad = append(bad, fmt.Sprintf("reclaim policy %s, want %s", pv.Spec.PersistentVolumeReclaimPolicy, w.reclaim))
	}
	if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != w.mode {
		bad = append(bad, fmt.Sprintf("volume mode %v, want %s", pv.Spec.VolumeMode, w.mode))
	}
	if pv.Spec.StorageClassName != w.class {
		bad = append(bad, fmt.Sprintf("StorageClass %q, want %q", pv.Spec.StorageClassName, w.class))
	}
	if !slices.Equal(pv.Spec.MountOptions, w.options) {
		bad = append(bad, fmt.Sprintf("mount options %v, want the class's %v", pv.Spec.MountOptions, w.options))
	}
	if len(bad) > 0 {
		return fmt.Errorf("PV %s: %s", pv.Name, strings.Join(bad, "; "))
	}
	return nil
}

// checkMountOptions finds the mount at path in the mount table and checks that it has each
// option.
func checkMountOptions(mps []mount.MountPoint, path string, want []string) error {
	var found *mount.MountPoint
	for i := range mps {
		if mps[i].Path == path {
			found = &mps[i] // the last mount at a path is the one seen
		}
	}
	if found == nil {
		return fmt.Errorf("no mount at %s", path)
	}
	var missing []string
	for _, o := range want {
		if !slices.Contains(found.Opts, o) {
			missing = append(missing, o)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the mount at %s lacks the class's mount options %v (it has %v)", path, missing, found.Opts)
	}
	return nil
}
