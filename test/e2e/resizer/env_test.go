package resizer

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// env is one test's world: a driver with a name no other test uses, its Node and CSINode,
// a namespace, the provisioner and the resizer, all as real processes.
type env struct {
	t       *testing.T
	ctx     context.Context
	cs      kubernetes.Interface
	ns      string
	driver  string
	node    string
	callLog string
	http    string // the resizer's --http-endpoint
	dir     string // the driver's directory, for the test's own mounts
	drv     *framework.ControllerDriver
	resizer *framework.Process
}

func newEnv(t *testing.T, driverArgs ...string) *env {
	t.Helper()
	id := strings.ToLower(rand.String(6))
	e := &env{
		t: t, ctx: framework.Context(t, 10*time.Minute), cs: framework.Client(t), ns: framework.Namespace(t),
		driver: "e2e-" + id + ".kubevol.io", node: "node-" + id,
	}
	// The driver's state; its cleanup also releases any mount or loop device under it.
	dir := drivertest.TempDir(t)
	e.callLog = filepath.Join(dir, "calls.jsonl")
	framework.CreateNode(e.ctx, t, e.cs, e.node, e.driver)
	e.dir = dir
	e.drv = framework.StartControllerDriver(e.ctx, t, dir, e.driver, e.node, append([]string{"--call-log", e.callLog}, driverArgs...)...)
	socket := e.drv.Endpoint
	framework.StartKubevol(t, "provisioner", "--csi-address", socket, "--kubeconfig", framework.RunAs(e.ctx, t, e.ns, "provisioner", framework.Provisioner),
		"--intent-namespace", e.ns, "--retry-interval-max", "10s", "-v", "3")
	e.http = framework.FreeAddr(t)
	e.resizer = framework.StartKubevol(t, "resizer", "--csi-address", socket, "--kubeconfig", framework.RunAs(e.ctx, t, e.ns, "resizer", framework.Resizer), "--http-endpoint", e.http,
		"--retry-interval-start", "200ms", "--retry-interval-max", "5s", "-v", "3")
	return e
}

// class creates an expandable, Immediate StorageClass of this driver.
func (e *env) class(params map[string]string) string {
	e.t.Helper()
	yes := true
	immediate := storagev1.VolumeBindingImmediate
	return framework.CreateStorageClass(e.ctx, e.t, e.cs, &storagev1.StorageClass{
		Provisioner:          e.driver,
		Parameters:           params,
		AllowVolumeExpansion: &yes,
		VolumeBindingMode:    &immediate,
	}).Name
}

// boundClaim creates a claim of class and waits until it is bound. Its cleanup deletes the
// claim and waits for the provisioner to delete the PV, removing the PV by force if a failed
// test left it behind.
func (e *env) boundClaim(name, class, size string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	e.t.Helper()
	pvc := framework.ClaimSpec(name, class, size)
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { e.deleteClaim(name) })
	pvc = e.waitClaim(name, "Bound", func(c *corev1.PersistentVolumeClaim) bool { return c.Status.Phase == corev1.ClaimBound })
	return pvc, e.pv(pvc.Spec.VolumeName)
}

func (e *env) deleteClaim(name string) {
	ctx := context.Background()
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	_ = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if pvc.Spec.VolumeName == "" {
		return
	}
	pvName := pvc.Spec.VolumeName
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err == nil {
		return
	}
	e.t.Errorf("PV %s not deleted after its claim; removing it by force", pvName)
	_ = e.cs.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{})
	if pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{}); err == nil && len(pv.Finalizers) > 0 {
		pv.Finalizers = nil
		_, _ = e.cs.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	}
}

// resize sets the claim's storage request.
func (e *env) resize(name, size string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		_, err = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Update(ctx, pvc, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		e.t.Fatalf("resize claim %s to %s: %v", name, size, err)
	}
}

func (e *env) waitClaim(name, what string, cond func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	last, err := kubecheck.WaitForClaim(e.ctx, e.cs, e.ns, name, 2*time.Minute, cond)
	if err != nil {
		var st any
		if last != nil {
			st = last.Status
		}
		e.t.Fatalf("claim %s never %s; status: %+v; events:\n%s", name, what, st, strings.Join(e.events(name), "\n"))
	}
	return last
}

func (e *env) pv(name string) *corev1.PersistentVolume {
	e.t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pv
}

// events returns "source: reason: message" lines of the claim's events.
func (e *env) events(name string) []string {
	return kubecheck.EventLines(e.cs, e.ns, name, func(ev corev1.Event) string {
		return ev.Source.Component + ": " + ev.Reason + ": " + ev.Message
	})
}

// waitEvent waits for an event of the claim from a source whose name contains source, with
// the reason.
func (e *env) waitEvent(name, source, reason string) {
	e.t.Helper()
	framework.WaitForEvent(e.ctx, e.t, e.cs, e.ns, name, reason+" event from "+source+" for claim "+name, time.Minute, func(ev corev1.Event) bool {
		return strings.Contains(ev.Source.Component, source) && ev.Reason == reason
	})
}

// calls returns the driver's calls of method on volumeID, as "method:code".
func (e *env) calls(method, volumeID string) []string {
	e.t.Helper()
	return framework.DriverCalls(e.t, e.callLog, func(r driver.CallRecord) bool {
		return r.Method == method && r.VolumeID == volumeID
	})
}

func storage(l corev1.ResourceList) resource.Quantity { return l[corev1.ResourceStorage] }
