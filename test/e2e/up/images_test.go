package up

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// TestUpRunsShippedImages runs kubevol's shipped images as pods, as an operator deploys
// them: the images `make images` builds (for this machine's platform) are imported into
// the containerd of `kubevol up --runtime containerd`, each sidecar image is started by
// `ctr run` with upstream's sample arguments (checkCtrRun), deploy/ is applied through an
// overlay (its own namespace and driver name beside up's host-process stack), and every
// sidecar runs with deploy/'s upstream argument lists as deploy/'s ServiceAccounts (the
// kubelet mounts their projected tokens). A claim of the deployed StorageClass is then
// provisioned by the containerised provisioner, attached by the containerised attacher and
// mounted by the containerised node plugin into a pod that writes to it; no container logs
// a 403. Then `kubevol verify --kubeconfig` runs every case against the deployed driver
// (verifyDeployed), and nothing is left once the objects are deleted and up is interrupted.
func TestUpRunsShippedImages(t *testing.T) {
	start := time.Now()
	// up itself runs the same static binary: one build instead of two.
	archive, bin := shippedImages(t)
	built := time.Now()

	dir := t.TempDir()
	state := sharedStateDir(t)
	// up's own snapshot-controller is left out: deploy/'s is the cluster's one, as on a
	// cluster an operator deploys to (two would both act on every VolumeSnapshot).
	r := startRuntimeUp(t, bin, dir, "images-e2e", "--image", archive, "--sidecars", "provisioner,attacher,resizer")
	upReady := time.Now()
	cfg, cs, node := r.cfg, r.cs, r.node
	limit := 10 * time.Minute
	if os.Getenv("KUBEVOL_E2E_VERIFY_ALL") == "1" {
		limit = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	checkCtrRun(t, ctx, cfg, cs, node.Socket())
	ctrRun := time.Now()

	objs := renderDeploy(t, node.KubeletRootDir(), state)
	onHostNetwork(t, objs, cfg.Host, node.NodeIP())
	a := newApplier(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("on failure:\n%s", diagnose(cs))
		}
	})
	if err := a.applyThenRun(ctx, cs, objs); err != nil {
		t.Fatal(err)
	}
	waitWorkloadsReady(t, ctx, cs)
	deployed := time.Now()

	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("kubevol-dir"),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runToEnd(t, ctx, cs, "writer", "echo kubevol-data > /data/f && sync && test \"$(cat /data/f)\" = kubevol-data")
	pv := checkProvisionedAndAttached(t, ctx, cs)
	used := time.Now()
	checkNoForbidden(t, ctx, cs)

	if err := cs.CoreV1().Pods("default").Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "writer", metav1.GetOptions{})
		return err
	})
	if err := cs.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The containerised attacher detaches and the provisioner deletes the volume.
	waitGone(t, ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		return err
	})
	verified := time.Now()
	verifyDeployed(t, ctx, bin, dir, node.KubeletRootDir())
	verifyTook := time.Since(verified)
	if err := a.deleteAll(ctx, objs); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()

	r.interruptLeavesNothing(t, dir, state)
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	t.Logf("timings: images and binary %s, up with the images imported %s, ctr run of each sidecar %s, deploy/ applied until Ready %s, claim provisioned, attached and used %s, kubevol verify %s, teardown %s, up stopped %s; total %s",
		round(built.Sub(start)), round(upReady.Sub(built)), round(ctrRun.Sub(upReady)), round(deployed.Sub(ctrRun)), round(used.Sub(deployed)),
		round(verifyTook), round(removed.Sub(used)-verifyTook), round(time.Since(removed)), round(time.Since(start)))
}

// sharedStateDir is the host directory of the deployed driver's state (deploy/'s
// /var/lib/kubevol/driver). Its pods mount it with Bidirectional propagation, which
// containerd allows only on a shared mount, as a systemd host's / is; this machine's / is
// private, so the directory is made a shared bind mount of itself, removed at the end.
func sharedStateDir(t *testing.T) string {
	t.Helper()
	state := filepath.Join(t.TempDir(), "driver")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(state, state, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(state, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", state, err)
		}
	})
	if err := unix.Mount("", state, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	return state
}

// waitWorkloadsReady waits until every Deployment and DaemonSet of the overlay's namespace
// has all its pods Ready, each container started from its image and passing its probes.
func waitWorkloadsReady(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		deps, err := cs.AppsV1().Deployments(imagesNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		dss, err := cs.AppsV1().DaemonSets(imagesNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(deps.Items) == 0 || len(dss.Items) == 0 {
			last = "no workloads"
			return false, nil
		}
		for _, d := range deps.Items {
			if d.Status.ReadyReplicas != *d.Spec.Replicas {
				last = "Deployment " + d.Name + " not ready"
				return false, nil
			}
		}
		for _, d := range dss.Items {
			if d.Status.DesiredNumberScheduled == 0 || d.Status.NumberReady != d.Status.DesiredNumberScheduled {
				last = "DaemonSet " + d.Name + " not ready"
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("deploy/'s workloads: %s: %v\n%s", last, err, podStates(ctx, cs))
	}
}

// podStates describes the overlay's pods' containers, for a failure message.
func podStates(ctx context.Context, cs kubernetes.Interface) string {
	pods, err := cs.CoreV1().Pods(imagesNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out string
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			out += p.Name + "/" + c.Name + ": "
			switch s := c.State; {
			case s.Waiting != nil:
				out += "waiting " + s.Waiting.Reason + " " + s.Waiting.Message
			case s.Terminated != nil:
				out += "terminated " + s.Terminated.Reason + " " + s.Terminated.Message
			default:
				out += "running"
			}
			if c.Ready {
				out += " ready"
			}
			out += "\n"
		}
	}
	return out
}

// diagnose describes the overlay's containers, the events and the tail of each container's
// log, for a failure message.
func diagnose(cs kubernetes.Interface) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := podStates(ctx, cs)
	for _, ns := range []string{"default", imagesNamespace} {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			out += err.Error() + "\n"
			continue
		}
		for _, e := range evs.Items {
			out += fmt.Sprintf("event %s %s/%s: %s %s\n", ns, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	pods, err := cs.CoreV1().Pods(imagesNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out + err.Error()
	}
	tail := int64(15)
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			log, err := cs.CoreV1().Pods(imagesNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &tail}).DoRaw(ctx)
			out += fmt.Sprintf("--- %s/%s (%v)\n%s", p.Name, c.Name, err, log)
		}
	}
	return out
}

// checkProvisionedAndAttached checks that the claim was provisioned by the deployed driver
// and its volume attached by it, and returns the volume's name.
func checkProvisionedAndAttached(t *testing.T, ctx context.Context, cs kubernetes.Interface) string {
	t.Helper()
	c, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim %s", c.Status.Phase)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != imagesDriverName {
		t.Errorf("volume %s not of %s: %+v", pv.Name, imagesDriverName, pv.Spec.CSI)
	}
	vas, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attached := false
	for _, va := range vas.Items {
		if s := va.Spec.Source.PersistentVolumeName; s != nil && *s == pv.Name {
			attached = va.Spec.Attacher == imagesDriverName && va.Status.Attached
		}
	}
	if !attached {
		t.Errorf("no attached VolumeAttachment of %s by %s", pv.Name, imagesDriverName)
	}
	return pv.Name
}

// checkNoForbidden reads every container's log through the apiserver (from the kubelet)
// and fails on a refused request: each component's ServiceAccount has the rights it needs.
func checkNoForbidden(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	pods, err := cs.CoreV1().Pods(imagesNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			log, err := cs.CoreV1().Pods(imagesNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("log of %s/%s: %v", p.Name, c.Name, err)
			}
			if m := framework.Forbidden.Find(log); m != nil {
				t.Errorf("%s/%s logged a refused request (%q):\n%s", p.Name, c.Name, m, log)
			}
			n++
		}
	}
	if n < 8 { // the controller pod's 6, the node plugin, the snapshot-controller
		t.Errorf("read %d container logs, want at least 8", n)
	}
}

func waitGone(t *testing.T, ctx context.Context, get func(context.Context) error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
