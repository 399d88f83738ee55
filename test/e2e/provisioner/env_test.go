package provisioner_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
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
	"github.com/kubevol/kubevol/test/e2e/framework"
)

const topologyKey = "topology.kubevol.io/node"

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
	conn     *csi.Conn
}

type envOptions struct {
	driverArgs []string // extra `kubevol driver` flags
	provArgs   []string // extra `kubevol provisioner` flags
	noProv     bool     // do not start the provisioner
	driverName string   // default: unique per test
	kubeconfig string   // the provisioner's; default: the admin kubeconfig
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	id := strings.ToLower(rand.String(6))
	e := &env{
		t: t, ctx: framework.Context(t, 10*time.Minute), cs: framework.Client(t), ns: framework.Namespace(t),
		driver: "e2e-" + id + ".kubevol.io", node: "node-" + id,
	}
	var err error
	if e.dir, err = os.MkdirTemp("", "kubevol-prov-e2e-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(e.dir) })
	e.socket = "unix://" + filepath.Join(e.dir, "csi.sock")
	if o.driverName != "" {
		e.driver = o.driverName
	}
	e.createNode()
	args := append([]string{"driver", "--endpoint", e.socket, "--node-id", e.node, "--state-dir", filepath.Join(e.dir, "state"),
		"--mode", "controller", "--drivername", e.driver}, o.driverArgs...)
	e.drv = framework.StartKubevol(t, args...)
	if e.conn, err = csi.Dial(csi.Config{Address: e.socket, Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close() })
	pctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	if err := e.conn.ProbeForever(pctx); err != nil {
		t.Fatalf("driver did not become ready: %v", err)
	}
	e.http = freeAddr(t)
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		kubeconfig = framework.Cluster().KubeconfigPath()
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

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// createNode makes the Node and CSINode a registered node plugin would have made, so that
// topology works without a kubelet.
func (e *env) createNode() {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node, Labels: map[string]string{topologyKey: e.node}}}
	if _, err := e.cs.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: e.node}, Spec: storagev1.CSINodeSpec{
		Drivers: []storagev1.CSINodeDriver{{Name: e.driver, NodeID: e.node, TopologyKeys: []string{topologyKey}}}}}
	if _, err := e.cs.StorageV1().CSINodes().Create(e.ctx, csiNode, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.cs.StorageV1().CSINodes().Delete(context.Background(), e.node, metav1.DeleteOptions{})
		_ = e.cs.CoreV1().Nodes().Delete(context.Background(), e.node, metav1.DeleteOptions{})
	})
}

// class creates a StorageClass of this driver; mutate adjusts it first.
func (e *env) class(mutate func(*storagev1.StorageClass)) *storagev1.StorageClass {
	e.t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc-" + strings.ToLower(rand.String(8))}, Provisioner: e.driver}
	if mutate != nil {
		mutate(sc)
	}
	sc, err := e.cs.StorageV1().StorageClasses().Create(e.ctx, sc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})
	return sc
}

func claimSpec(name, class, size string, mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
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
	var pvc *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		pvc, err = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return pvc.Status.Phase == corev1.ClaimBound, nil
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
	list, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return strings.Join(out, "\n")
}

// waitEvent waits for an event of the object with the reason and a message containing want.
func (e *env) waitEvent(name, reason, want string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, line := range strings.Split(e.events(name), "\n") {
			if strings.HasPrefix(line, reason+": ") && strings.Contains(line, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no %s event containing %q for %s; events:\n%s", reason, want, name, e.events(name))
	}
}

// volumes lists the driver's volumes by ID.
func (e *env) volumes() []string {
	e.t.Helper()
	var ids []string
	token := ""
	for {
		ctx, cancel := e.conn.WithTimeout(e.ctx)
		rsp, err := e.conn.Controller.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: token})
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
	rsp, err := http.Get("http://" + e.http + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	return string(b)
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
