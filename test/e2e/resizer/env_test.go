package resizer

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/csi"
	"github.com/kubevol/kubevol/internal/driver"
	"github.com/kubevol/kubevol/internal/driver/drivertest"
	"github.com/kubevol/kubevol/internal/localcluster"
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
}

func newEnv(t *testing.T) *env {
	t.Helper()
	id := strings.ToLower(rand.String(6))
	e := &env{
		t: t, ctx: framework.Context(t, 10*time.Minute), cs: framework.Client(t), ns: framework.Namespace(t),
		driver: "e2e-" + id + ".kubevol.io", node: "node-" + id,
	}
	// The driver's state; its cleanup also releases any mount or loop device under it.
	dir := drivertest.TempDir(t)
	e.callLog = filepath.Join(dir, "calls.jsonl")
	socket := "unix://" + filepath.Join(dir, "csi.sock")
	e.createNode()
	framework.StartKubevol(t, "driver", "--endpoint", socket, "--node-id", e.node, "--state-dir", filepath.Join(dir, "state"),
		"--mode", "controller", "--drivername", e.driver, "--call-log", e.callLog)
	conn, err := csi.Dial(csi.Config{Address: socket, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	if err := conn.ProbeForever(pctx); err != nil {
		t.Fatalf("driver did not become ready: %v", err)
	}
	kubeconfig := framework.Cluster().KubeconfigPath()
	framework.StartKubevol(t, "provisioner", "--csi-address", socket, "--kubeconfig", kubeconfig,
		"--intent-namespace", e.ns, "--retry-interval-max", "10s", "-v", "3")
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	e.http = "127.0.0.1:" + strconv.Itoa(ports[0])
	framework.StartKubevol(t, "resizer", "--csi-address", socket, "--kubeconfig", kubeconfig, "--http-endpoint", e.http,
		"--retry-interval-start", "200ms", "--retry-interval-max", "5s", "-v", "3")
	return e
}

// createNode makes the Node and CSINode that a registered node plugin would have made: the
// provisioner takes the topology of Immediate claims from them.
func (e *env) createNode() {
	e.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node, Labels: map[string]string{driver.TopologyKey: e.node}}}
	if _, err := e.cs.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: e.node}, Spec: storagev1.CSINodeSpec{
		Drivers: []storagev1.CSINodeDriver{{Name: e.driver, NodeID: e.node, TopologyKeys: []string{driver.TopologyKey}}}}}
	if _, err := e.cs.StorageV1().CSINodes().Create(e.ctx, csiNode, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.cs.StorageV1().CSINodes().Delete(context.Background(), e.node, metav1.DeleteOptions{})
		_ = e.cs.CoreV1().Nodes().Delete(context.Background(), e.node, metav1.DeleteOptions{})
	})
}

// class creates an expandable, Immediate StorageClass of this driver.
func (e *env) class(params map[string]string) string {
	e.t.Helper()
	yes := true
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: "sc-" + strings.ToLower(rand.String(8))},
		Provisioner:          e.driver,
		Parameters:           params,
		AllowVolumeExpansion: &yes,
		VolumeBindingMode:    &immediate,
	}
	if _, err := e.cs.StorageV1().StorageClasses().Create(e.ctx, sc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})
	return sc.Name
}

// boundClaim creates a claim of class and waits until it is bound. Its cleanup deletes the
// claim and waits for the provisioner to delete the PV, removing the PV by force if a failed
// test left it behind.
func (e *env) boundClaim(name, class, size string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	e.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
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
	var last *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pvc
		return cond(pvc), nil
	})
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
	list, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Source.Component+": "+ev.Reason+": "+ev.Message)
	}
	return out
}

// waitEvent waits for an event of the claim from a source whose name contains source, with
// the reason.
func (e *env) waitEvent(name, source, reason string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, ev := range e.events(name) {
			src, rest, _ := strings.Cut(ev, ": ")
			if strings.Contains(src, source) && strings.HasPrefix(rest, reason+": ") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no %s event from %s for claim %s; events:\n%s", reason, source, name, strings.Join(e.events(name), "\n"))
	}
}

// calls returns the driver's calls of method on volumeID, as "method:code".
func (e *env) calls(method, volumeID string) []string {
	e.t.Helper()
	recs, err := driver.ReadCallLog(e.callLog)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.Method == method && r.VolumeID == volumeID {
			out = append(out, r.Method+":"+r.Code)
		}
	}
	return out
}

func storage(l corev1.ResourceList) resource.Quantity { return l[corev1.ResourceStorage] }
