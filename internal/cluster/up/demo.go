package up

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/examples"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/pkg/volume"
)

// demoTimeout bounds each wait of the demo; a healthy stack needs seconds.
const demoTimeout = 2 * time.Minute

// NodeRootDir is the node agent's --root-dir: pods/<uid>/volumes/... live below it.
func (s *Stack) NodeRootDir() string { return s.path("node") }

// Demo applies examples/, shows where each volume of the demo pod is mounted on this
// machine, writes through the PVC's mount, recreates the pod and shows the data survived.
// The demo objects stay, for inspection with kubectl.
func (s *Stack) Demo(ctx context.Context, out io.Writer) error {
	cs, err := kubernetes.NewForConfig(s.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	objs, err := demoObjects()
	if err != nil {
		return err
	}
	var pod *corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pod = p
			continue
		}
		if err := createIfMissing(ctx, cs, o); err != nil {
			return err
		}
	}
	if pod == nil {
		return errors.New("demo: examples/ has no pod")
	}
	fmt.Fprintf(out, "\ndemo: applied examples/ (namespace %s)\n", examples.Namespace)

	first, err := recreatePod(ctx, cs, pod)
	if err != nil {
		return err
	}
	dataDir, err := s.showVolumes(ctx, cs, first, out)
	if err != nil {
		return err
	}
	file := filepath.Join(dataDir, "hello.txt")
	msg := fmt.Sprintf("written at %s through pod %s\n", time.Now().UTC().Format(time.RFC3339), first.UID)
	if err := os.WriteFile(file, []byte(msg), 0o644); err != nil {
		return fmt.Errorf("demo: write through the PVC mount: %w", err)
	}
	fmt.Fprintf(out, "\nwrote %s: %s", file, msg)

	fmt.Fprintf(out, "deleting and recreating pod %s/%s…\n", pod.Namespace, pod.Name)
	second, dataDir, err := s.remount(ctx, cs, pod)
	if err != nil {
		return err
	}
	got, err := os.ReadFile(filepath.Join(dataDir, "hello.txt"))
	if err != nil {
		return fmt.Errorf("demo: the data did not survive the pod: %w", err)
	}
	fmt.Fprintf(out, "new pod %s mounts the same volume at %s; hello.txt still says: %s", second.UID, dataDir, got)
	snap, err := s.snapshotClient()
	if err != nil {
		return err
	}
	if err := s.demoSnapshot(ctx, cs, snap, out); err != nil {
		return err
	}
	if err := s.demoModify(ctx, cs, second, out); err != nil {
		return err
	}
	if err := s.demoGroupSnapshot(ctx, cs, snap, out); err != nil {
		return err
	}
	kc := s.Cluster.KubeconfigPath()
	fmt.Fprintf(out, "\ninspect it:\n  kubectl --kubeconfig %s -n %s get pod,pvc -o wide\n  kubectl --kubeconfig %s get pv,volumeattachments,csinodes\n  kubectl --kubeconfig %s -n %s describe pod %s\n",
		kc, examples.Namespace, kc, kc, examples.Namespace, pod.Name)
	return nil
}

// demoObjects decodes every manifest, cluster-scoped and configuration objects first.
func demoObjects() ([]runtime.Object, error) { return decodeManifests(examples.Manifests) }

// decodeManifests decodes the manifests of fsys, cluster-scoped and configuration objects
// first, pods last.
func decodeManifests(fsys fs.ReadFileFS) ([]runtime.Object, error) {
	var objs []runtime.Object
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := fsys.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var ext runtime.RawExtension
			if err := dec.Decode(&ext); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return fmt.Errorf("examples/%s: %w", path, err)
			}
			if len(bytes.TrimSpace(ext.Raw)) == 0 {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(ext.Raw, nil, nil)
			if err != nil {
				return fmt.Errorf("examples/%s: %w", path, err)
			}
			objs = append(objs, obj)
		}
	})
	if err != nil {
		return nil, err
	}
	rank := func(o runtime.Object) int {
		switch o.(type) {
		case *corev1.Namespace:
			return 0
		case *corev1.Pod:
			return 2
		}
		return 1
	}
	out := make([]runtime.Object, 0, len(objs))
	for r := 0; r <= 2; r++ {
		for _, o := range objs {
			if rank(o) == r {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// createIfMissing creates obj, keeping an existing one: the demo can run again on a kept
// state directory.
func createIfMissing(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *storagev1.StorageClass:
		_, err = cs.StorageV1().StorageClasses().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Secret:
		_, err = cs.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.PersistentVolumeClaim:
		_, err = cs.CoreV1().PersistentVolumeClaims(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		return fmt.Errorf("demo: unsupported object %T in examples/", obj)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// recreatePod deletes the pod if it exists, waits for the node agent to finish its deletion
// (after unmounting), creates it again and waits for its volumes: they are mounted once the
// PVC is provisioned and bound.
func recreatePod(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (*corev1.Pod, error) {
	if err := kubecheck.DeletePod(ctx, cs, pod.Namespace, pod.Name, demoTimeout); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if _, err := kubecheck.CreatePod(ctx, cs, pod.Namespace, pod, demoTimeout); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	cur, err := kubecheck.WaitPod(ctx, cs, pod.Namespace, pod.Name, demoTimeout, kubecheck.VolumesReadyTrue)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return cur, nil
}

// showVolumes prints each volume's directory and what is mounted there; it returns the
// PVC's mount.
func (s *Stack) showVolumes(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, out io.Writer) (string, error) {
	mis, _ := mount.ParseMountInfo("/proc/self/mountinfo")
	mounted := map[string]mount.MountInfo{}
	for _, mi := range mis {
		mounted[mi.MountPoint] = mi
	}
	fmt.Fprintf(out, "pod %s/%s (uid %s) is on node %s; its volumes on this machine:\n", pod.Namespace, pod.Name, pod.UID, pod.Spec.NodeName)
	var data string
	for _, v := range pod.Spec.Volumes {
		path, kind, err := s.volumePath(ctx, cs, pod, v)
		if err != nil {
			return "", err
		}
		if v.PersistentVolumeClaim != nil {
			data = path
		}
		how := "a directory of the node root (not a mount)"
		if mi, ok := mounted[path]; ok {
			how = fmt.Sprintf("mounted: %s %s", mi.FsType, mi.Source)
			if mi.Root != "/" {
				how += ", bind of " + mi.Root
			}
		}
		fmt.Fprintf(out, "  %-22s %-28s %s\n  %-22s %s\n", v.Name, kind, path, "", how)
	}
	if data == "" {
		return "", errors.New("demo: the pod has no PVC volume")
	}
	return data, nil
}

// remount recreates pod (recreatePod) and returns it with the mount of its PVC.
func (s *Stack) remount(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (*corev1.Pod, string, error) {
	cur, err := recreatePod(ctx, cs, pod)
	if err != nil {
		return nil, "", err
	}
	dir, err := s.pvcMount(ctx, cs, cur)
	if err != nil {
		return nil, "", err
	}
	return cur, dir, nil
}

func (s *Stack) pvcMount(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			p, _, err := s.volumePath(ctx, cs, pod, v)
			return p, err
		}
	}
	return "", errors.New("demo: the pod has no PVC volume")
}

// volumePath is where the node agent set v up, in the kubelet's layout.
func (s *Stack) volumePath(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, v corev1.Volume) (path, kind string, err error) {
	paths := volume.Paths{Root: s.NodeRootDir()}
	switch {
	case v.PersistentVolumeClaim != nil:
		pvc, err := cs.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil {
			return "", "", err
		}
		return filepath.Join(paths.PodVolumeDir(pod.UID, "kubernetes.io/csi", pvc.Spec.VolumeName), "mount"), "PVC " + pvc.Name + " → PV " + pvc.Spec.VolumeName, nil
	case v.CSI != nil:
		return filepath.Join(paths.PodVolumeDir(pod.UID, "kubernetes.io/csi", v.Name), "mount"), "inline CSI " + v.CSI.Driver, nil
	case v.ConfigMap != nil:
		return paths.PodVolumeDir(pod.UID, "kubernetes.io/configmap", v.Name), "configMap " + v.ConfigMap.Name, nil
	case v.Secret != nil:
		return paths.PodVolumeDir(pod.UID, "kubernetes.io/secret", v.Name), "secret " + v.Secret.SecretName, nil
	case v.EmptyDir != nil:
		return paths.PodVolumeDir(pod.UID, "kubernetes.io/empty-dir", v.Name), "emptyDir", nil
	case v.Projected != nil:
		// The service account token volume the ServiceAccount admission plugin adds.
		return paths.PodVolumeDir(pod.UID, "kubernetes.io/projected", v.Name), "projected", nil
	}
	return "", "", fmt.Errorf("demo: volume %q: no example of this volume type", v.Name)
}
