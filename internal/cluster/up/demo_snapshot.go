package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/examples"
)

// snapshotClient is a client of the snapshot CRDs, which are served only as JSON.
func (s *Stack) snapshotClient() (snapclient.Interface, error) {
	cfg := rest.CopyConfig(s.Cluster.RESTConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	return snapclient.NewForConfig(cfg)
}

// demoSnapshot applies examples/snapshot: it snapshots the demo's claim, waits until the
// snapshot is ready, restores it into a new claim, mounts that in a pod and shows that the
// file written before the snapshot is there.
func (s *Stack) demoSnapshot(ctx context.Context, cs kubernetes.Interface, snap snapclient.Interface, out io.Writer) error {
	objs, err := decodeManifests(examples.Snapshot)
	if err != nil {
		return err
	}
	var vs *snapv1.VolumeSnapshot
	var pod *corev1.Pod
	var rest []runtime.Object
	for _, o := range objs {
		switch o := o.(type) {
		case *snapv1.VolumeSnapshot:
			vs = o
		case *corev1.Pod:
			pod = o
		default:
			rest = append(rest, o)
		}
	}
	if vs == nil || pod == nil {
		return errors.New("demo: examples/snapshot needs a VolumeSnapshot and a pod")
	}
	fmt.Fprintf(out, "\ntaking VolumeSnapshot %s/%s of claim %s…\n", vs.Namespace, vs.Name, ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, ""))
	if _, err := snap.SnapshotV1().VolumeSnapshots(vs.Namespace).Create(ctx, vs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, demoTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := snap.SnapshotV1().VolumeSnapshots(vs.Namespace).Get(ctx, vs.Name, metav1.GetOptions{})
		if err != nil || cur.Status == nil {
			return false, nil
		}
		vs = cur
		return ptr.Deref(cur.Status.ReadyToUse, false), nil
	})
	if err != nil {
		return fmt.Errorf("demo: VolumeSnapshot %s not ready: %w (status %+v)", vs.Name, err, vs.Status)
	}
	fmt.Fprintf(out, "ready to use after %s: content %s, restore size %s, class %s\n", time.Since(start).Round(time.Millisecond),
		ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, ""), vs.Status.RestoreSize, ptr.Deref(vs.Spec.VolumeSnapshotClassName, ""))

	for _, o := range rest {
		if err := createIfMissing(ctx, cs, o); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "restoring it into claim %s, mounted by pod %s…\n", pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, pod.Name)
	return s.showRestored(ctx, cs, pod, "the restored claim", out)
}

// showRestored (re)creates pod, which mounts a restored claim, and shows the file the
// demo wrote before the snapshot, read through the pod's mount.
func (s *Stack) showRestored(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, what string, out io.Writer) error {
	_, dir, err := s.remount(ctx, cs, pod)
	if err != nil {
		return err
	}
	got, err := os.ReadFile(filepath.Join(dir, "hello.txt"))
	if err != nil {
		return fmt.Errorf("demo: %s lacks the data: %w", what, err)
	}
	fmt.Fprintf(out, "%s is mounted at %s; hello.txt says: %s", what, dir, got)
	return nil
}
