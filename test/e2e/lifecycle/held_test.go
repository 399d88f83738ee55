package lifecycle

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// A node holds on to a running pod's volumes whatever its reads of the API say: these tests
// run the agent with a claim sync every 2 s, so that a claim is read again several times
// while the API misbehaves.

// heldSyncArgs make the agent read its running pods' claims again every 2 s.
var heldSyncArgs = []string{"--sync-frequency", "2s"}

// runningPod is a pod with one claim, its volumes ready, and a file written in its mount.
type runningPod struct {
	pod    *corev1.Pod
	claim  string
	pv     string
	handle string
	target string // the pod's mount of the claim
}

func (e *env) runningPod(name string) runningPod {
	e.t.Helper()
	pvc := e.pvc(name + "-data")
	pod := e.waitVolumesReady(e.pod(name, kubecheck.ClaimVolume("data", pvc.Name)))
	pv := e.boundPV(pvc.Name)
	r := runningPod{pod: pod, claim: pvc.Name, pv: pv.Name, handle: pv.Spec.CSI.VolumeHandle,
		target: filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv.Name, "mount")}
	if err := os.WriteFile(filepath.Join(r.target, "data"), []byte(name), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return r
}

// checkHeld fails the test unless the pod's volume is still mounted with its data and was
// never unpublished.
func (e *env) checkHeld(r runningPod, when string) {
	e.t.Helper()
	if data, err := os.ReadFile(filepath.Join(r.target, "data")); !isMountPoint(r.target) || err != nil || string(data) != r.pod.Name {
		e.t.Fatalf("%s: the volume of running pod %s is gone (mounted %v, data %q, %v)", when, r.pod.Name, isMountPoint(r.target), data, err)
	}
	if slices.Contains(e.succeeded(r.handle), "NodeUnpublishVolume") {
		e.t.Fatalf("%s: the volume of running pod %s was unpublished: %v", when, r.pod.Name, e.succeeded(r.handle))
	}
}

// holdFor checks every second for d that the pods' volumes are held.
func (e *env) holdFor(d time.Duration, when string, pods ...runningPod) {
	e.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		for _, r := range pods {
			e.checkHeld(r, when)
		}
	}
}

// teardown deletes the pod and its claim and checks that the volume went in order and left
// nothing.
func (e *env) teardown(r runningPod) {
	e.t.Helper()
	e.deletePod(r.pod)
	e.deleteClaim(r.claim, r.pv)
	if err := inOrder(e.succeeded(r.handle), []string{"NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}); err != nil {
		e.t.Errorf("teardown of %s: %v; calls: %v", r.pod.Name, err, e.succeeded(r.handle))
	}
}

// kubectl delete pvc under a running pod: pvc-protection keeps the claim Terminating and the
// node keeps the volume mounted until the pod is gone; then the claim and its volume go.
func TestClaimDeletedUnderRunningPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agentArgs: heldSyncArgs})
	e.waitRegistered()
	r := e.runningPod("inuse")
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, r.claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.poll("claim "+r.claim+" Terminating", func(ctx context.Context) (bool, error) {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, r.claim, metav1.GetOptions{})
		return err == nil && pvc.DeletionTimestamp != nil, nil
	})
	e.holdFor(10*time.Second, "claim deleted under the pod", r)
	e.waitVolumesReady(r.pod)

	e.deletePod(r.pod)
	e.poll("PV "+r.pv+" deleted", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, r.pv, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err := inOrder(e.succeeded(r.handle), []string{"NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}); err != nil {
		t.Errorf("teardown: %v; calls: %v", err, e.succeeded(r.handle))
	}
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// killComponent kills a component of the package's control plane, as a crash would; the
// cleanup starts it again if the test did not, so that a failure leaves the other tests a
// working cluster.
func killComponent(t *testing.T, name string) (start func()) {
	t.Helper()
	c := framework.Cluster()
	if err := c.Process(name).Kill(); err != nil {
		t.Fatalf("kill %s: %v", name, err)
	}
	started := false
	start = func() {
		if started {
			return
		}
		started = true
		if err := c.Respawn(context.Background(), name); err != nil {
			t.Fatalf("start %s again: %v", name, err)
		}
	}
	t.Cleanup(start)
	return start
}

// kube-apiserver down across several claim syncs: the agent's claim and PV reads fail
// after its pods were read, and the running pod keeps its volume; it is still ready when
// the control plane is back.
//
// It stops the package's control plane, so it does not run in parallel.
func TestControlPlaneDownUnderRunningPod(t *testing.T) {
	e := newEnv(t, envOptions{agentArgs: heldSyncArgs})
	e.waitRegistered()
	r := e.runningPod("app")

	startAPI := killComponent(t, localcluster.APIServer)
	e.holdFor(10*time.Second, "kube-apiserver down", r)
	startAPI()
	e.holdFor(5*time.Second, "kube-apiserver back", r)
	e.waitVolumesReady(r.pod)
	e.teardown(r)
}

// The agent killed and started again while etcd is down, and a pod deleted while the agent
// was away: nothing is torn down before the agent has read the current pods. Once it has,
// its claim and PV reads are refused for a while (through the API proxy): the running pod
// keeps its volume all the same, since what it wants is not known yet, while the deleted
// pod's volume is torn down.
//
// It stops the package's control plane, so it does not run in parallel.
func TestAgentRestartedWhileControlPlaneDown(t *testing.T) {
	e := newEnv(t, envOptions{agentArgs: heldSyncArgs, apiProxy: true})
	e.waitRegistered()
	keep := e.runningPod("keep")
	gone := e.runningPod("gone")

	e.agent.Kill()
	// Deleted while no agent runs: it stays Terminating until the agent tears it down.
	if err := e.cs.CoreV1().Pods(e.ns).Delete(e.ctx, gone.pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.api.Refuse(func(r *http.Request) bool {
		return r.Method == http.MethodGet && (strings.Contains(r.URL.Path, "/persistentvolumeclaims/") || strings.Contains(r.URL.Path, "/persistentvolumes/"))
	})
	startEtcd := killComponent(t, localcluster.Etcd)
	e.agent.Start()
	e.holdFor(15*time.Second, "agent restarted with etcd down", keep, gone)
	startEtcd()

	e.poll("pod "+gone.pod.Name+" torn down and gone", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, gone.pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if isMountPoint(gone.target) {
		t.Errorf("the deleted pod's volume is still mounted at %s", gone.target)
	}
	e.holdFor(10*time.Second, "pods read, claims refused", keep)
	if len(e.api.Refused()) == 0 {
		t.Fatal("the agent read no claim or PV while they were refused")
	}
	e.api.Refuse(nil)
	e.waitVolumesReady(keep.pod)
	e.checkHeld(keep, "claims readable again")
	e.deleteClaim(gone.claim, gone.pv)
	e.teardown(keep)
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
