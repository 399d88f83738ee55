package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/examples"
	"github.com/kubevol/kubevol/internal/kubecheck"
)

// Demo classes of examples/modify.
const (
	demoReadOnly  = "kubevol-readonly"
	demoReadWrite = "kubevol-readwrite"
)

// demoModify applies examples/modify and changes the class of the demo's claim while pod
// uses it: read-only (a write through the pod's mount fails), then writable again.
func (s *Stack) demoModify(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, out io.Writer) error {
	objs, err := decodeManifests(examples.Modify)
	if err != nil {
		return err
	}
	for _, o := range objs {
		vac, ok := o.(*storagev1.VolumeAttributesClass)
		if !ok {
			return fmt.Errorf("demo: unsupported object %T in examples/modify", o)
		}
		if _, err := cs.StorageV1().VolumeAttributesClasses().Create(ctx, vac, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	dir, err := s.pvcMount(ctx, cs, pod)
	if err != nil {
		return err
	}
	var claim *corev1.PersistentVolumeClaimVolumeSource
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim
		}
	}
	if claim == nil {
		return errors.New("demo: the pod has no PVC volume")
	}
	for _, class := range []string{demoReadOnly, demoReadWrite} {
		fmt.Fprintf(out, "\nchanging the class of claim %s/%s to VolumeAttributesClass %s (kubectl patch pvc)…\n", pod.Namespace, claim.ClaimName, class)
		start := time.Now()
		if err := setClaimClass(ctx, cs, pod.Namespace, claim.ClaimName, class); err != nil {
			return err
		}
		err := os.WriteFile(filepath.Join(dir, "after-"+class+".txt"), []byte("written after the class "+class+"\n"), 0o644)
		switch {
		case class == demoReadOnly && errors.Is(err, syscall.EROFS):
			fmt.Fprintf(out, "modified after %s: the pod's mount %s is read-only now (write: %v)\n", time.Since(start).Round(time.Millisecond), dir, err)
		case class == demoReadWrite && err == nil:
			fmt.Fprintf(out, "modified after %s: the pod's mount %s takes writes again\n", time.Since(start).Round(time.Millisecond), dir)
		default:
			return fmt.Errorf("demo: after the class %s, a write through %s gave %v", class, dir, err)
		}
	}
	return nil
}

// setClaimClass patches the claim's class and waits until its status says the volume has
// it, with nothing of the modification left.
func setClaimClass(ctx context.Context, cs kubernetes.Interface, ns, name, class string) error {
	if err := kubecheck.PatchClaimClass(ctx, cs, ns, name, class); err != nil {
		return err
	}
	last, err := kubecheck.WaitForClaim(ctx, cs, ns, name, demoTimeout, kubecheck.ModifiedTo(class))
	if err != nil {
		st := "never read"
		if last != nil {
			st = kubecheck.Modification(last)
		}
		return fmt.Errorf("demo: claim %s/%s did not reach class %s: %w (%s)", ns, name, class, err, st)
	}
	return nil
}
