package provisioner_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// topologyKey is the driver's topology label, which framework.CreateNode sets.
const topologyKey = driver.TopologyKey

// env is one test's private world: a driver with a unique name, its node objects, a
// namespace, a StorageClass factory and the provisioner process.
type env struct {
	t        *testing.T
	ctx      context.Context
	cs       kubernetes.Interface
	ns       string
	driver   string
	node     string
	dir      string
	socket   string
	drv      *framework.Process
	prov     *framework.Process
	provArgs []string
	http     string
	conn     *csiclient.Conn
}

type envOptions struct {
	driverArgs []string // extra `kubevol driver` flags
	provArgs   []string // extra `kubevol provisioner` flags
	noProv     bool     // do not start the provisioner
	driverName string   // default: unique per test
	kubeconfig string   // the provisioner's; default: its ServiceAccount bound to deploy/'s RBAC
	// readSecrets grants the provisioner `get` on secrets, as an operator adds it to
	// upstream's role for StorageClasses with secret parameters.
	readSecrets bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	id := strings.ToLower(rand.String(6))
	e := &env{
		t: t, ctx: framework.Context(t, 10*time.Minute), cs: framework.Client(t), ns: framework.Namespace(t),
		driver: "e2e-" + id + ".kubevol.io", node: "node-" + id,
	}
	// The driver's state; its cleanup also releases any loop device under it.
	e.dir = drivertest.TempDir(t)
	if o.driverName != "" {
		e.driver = o.driverName
	}
	framework.CreateNode(e.ctx, t, e.cs, e.node, e.driver)
	drv := framework.StartControllerDriver(e.ctx, t, e.dir, e.driver, e.node, o.driverArgs...)
	e.drv, e.socket, e.conn = drv.Process, drv.Endpoint, drv.Conn
	e.http = freeAddr(t)
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		if o.readSecrets {
			kubeconfig = framework.RunAsReadingSecrets(e.ctx, t, e.ns, "provisioner", framework.Provisioner)
		} else {
			kubeconfig = framework.RunAs(e.ctx, t, e.ns, "provisioner", framework.Provisioner)
		}
	}
	e.provArgs = append([]string{"provisioner", "--csi-address", e.socket, "--kubeconfig", kubeconfig,
		"--intent-namespace", e.ns, "--http-endpoint", e.http, "--retry-interval-max", "10s", "-v", "3"}, o.provArgs...)
	if !o.noProv {
		e.startProvisioner()
	}
	return e
}

func (e *env) startProvisioner() {
	if e.prov == nil {
		e.prov = framework.StartKubevol(e.t, e.provArgs...)
	} else {
		e.prov.Start()
	}
}

// freeAddr is kept under its old name for the tests that call it.
var freeAddr = framework.FreeAddr

// class creates a StorageClass of this driver; mutate adjusts it first.
func (e *env) class(mutate func(*storagev1.StorageClass)) *storagev1.StorageClass {
	e.t.Helper()
	sc := &storagev1.StorageClass{Provisioner: e.driver}
	if mutate != nil {
		mutate(sc)
	}
	return framework.CreateStorageClass(e.ctx, e.t, e.cs, sc)
}

func claimSpec(name, class, size string, mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := framework.ClaimSpec(name, class, size)
	if mutate != nil {
		mutate(pvc)
	}
	return pvc
}

func (e *env) createClaim(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	out, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) waitBound(name string, timeout time.Duration) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	e.t.Helper()
	pvc, err := kubecheck.WaitForClaim(e.ctx, e.cs, e.ns, name, timeout, func(c *corev1.PersistentVolumeClaim) bool {
		return c.Status.Phase == corev1.ClaimBound
	})
	if err != nil {
		e.t.Fatalf("claim %s not Bound: %v; events: %s", name, err, e.events(name))
	}
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pvc, pv
}

// events returns "reason: message" lines of the claim's events.
func (e *env) events(name string) string {
	return strings.Join(kubecheck.EventLines(e.cs, e.ns, name, func(ev corev1.Event) string {
		return ev.Reason + ": " + ev.Message
	}), "\n")
}

// waitEvent waits for an event of the object with the reason and a message containing want.
func (e *env) waitEvent(name, reason, want string) {
	e.t.Helper()
	framework.WaitForEvent(e.ctx, e.t, e.cs, e.ns, name, reason+" event for "+name, time.Minute, kubecheck.EventWith(reason, want))
}

// volumes lists the driver's volumes by ID.
func (e *env) volumes() []string {
	e.t.Helper()
	var ids []string
	token := ""
	for {
		ctx, cancel := e.conn.WithTimeout(e.ctx)
		rsp, err := e.conn.Controller.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: token})
		cancel()
		if err != nil {
			e.t.Fatalf("ListVolumes: %v", err)
		}
		for _, v := range rsp.GetEntries() {
			ids = append(ids, v.GetVolume().GetVolumeId())
		}
		if token = rsp.GetNextToken(); token == "" {
			break
		}
	}
	slices.Sort(ids)
	return ids
}

// waitVolumes waits until the driver holds exactly n volumes.
func (e *env) waitVolumes(n int, timeout time.Duration) {
	e.t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		got = e.volumes()
		return len(got) == n, nil
	})
	if err != nil {
		e.t.Fatalf("driver has volumes %v, want %d", got, n)
	}
}

func (e *env) waitGone(get func(ctx context.Context) error, what string, timeout time.Duration) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		e.t.Fatalf("%s still exists", what)
	}
}

func (e *env) deleteClaim(name string) {
	e.t.Helper()
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
}

func (e *env) metrics() string {
	e.t.Helper()
	return framework.Get(e.t, "http://"+e.http+"/metrics")
}

func (e *env) pvGetter(name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		return err
	}
}

func fatalIf(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
