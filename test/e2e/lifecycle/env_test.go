package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/mount-utils"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// env is one test's world: a driver name, node and directories no other test uses, so
// tests run in parallel, and the four kubevol processes.
type env struct {
	t       *testing.T
	ctx     context.Context
	cs      kubernetes.Interface
	ns      string
	name    string // CSI driver name
	node    string
	sc      string
	dir     string // holds root, state, socket and call log
	root    string // the node agent's --root-dir
	callLog string
	attach  bool
	driver  *framework.Process
	prov    *framework.Process
	agent   *framework.Process
	metrics string // the agent's /metrics URL
	// procs are all the kubevol processes of the test, for their logs.
	procs []*framework.Process
	// proxy is between the agent and the driver's node service (envOptions.nodeProxy).
	proxy *nodeProxy
	// api is between the agent and the API server (envOptions.apiProxy).
	api *framework.APIProxy
}

type envOptions struct {
	attachRequired bool
	faults         []string
	// scParams are the StorageClass parameters; the default is a dir volume.
	scParams map[string]string
	// readSecrets grants the provisioner, attacher and resizer `get` on secrets, as an
	// operator does for StorageClasses with secret parameters.
	readSecrets bool
	// resizer also runs `kubevol resizer`.
	resizer bool
	// republish sets the CSIDriver's requiresRepublish, and the agent's --sync-frequency to
	// a second.
	republish bool
	// verbosity is every process's -v (default: the agent's 4, klog's 0 for the others).
	verbosity string
	// csiDriver adjusts the CSIDriver's spec.
	csiDriver func(*storagev1.CSIDriverSpec)
	// nodeProxy registers the driver with the agent through a nodeProxy.
	nodeProxy bool
	// apiProxy puts a framework.APIProxy between the agent and the API server, which
	// forwards as the node (system:node:<name>) and can refuse requests.
	apiProxy bool
	// agentArgs are more flags of the node agent; driverArgs of the driver.
	agentArgs  []string
	driverArgs []string
	// driverName registers the driver under this name instead of a unique one (a CSI
	// migration target's, such as ebs.csi.aws.com); one test at a time may use a name.
	driverName string
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	s := rand.String(6)
	e := &env{t: t, ctx: framework.Context(t, 5*time.Minute), cs: framework.Client(t), ns: framework.Namespace(t),
		name: "e2e-" + s + ".kubevol.io", node: "csi-node-" + s, sc: "sc-" + s, attach: o.attachRequired}
	if o.driverName != "" {
		e.name = o.driverName
	}
	// Not t.TempDir: a long test name would make the socket paths exceed the 108 bytes of
	// a unix socket address.
	dir, err := os.MkdirTemp("", "kvcsi-")
	if err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	e.root = filepath.Join(e.dir, "root")
	e.callLog = filepath.Join(e.dir, "calls.jsonl")
	// Registered before the processes start, so it runs after they are stopped and before
	// the temp dir is removed: removing a directory through a leaked bind mount would
	// delete the backend's data.
	t.Cleanup(func() {
		e.unmountLeftovers()
		_ = os.RemoveAll(e.dir)
	})

	spec := storagev1.CSIDriverSpec{
		AttachRequired:       &o.attachRequired,
		PodInfoOnMount:       ptr.To(true),
		FSGroupPolicy:        ptr.To(storagev1.FileFSGroupPolicy),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		RequiresRepublish:    &o.republish,
	}
	if o.csiDriver != nil {
		o.csiDriver(&spec)
	}
	e.apply(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: e.name}, Spec: spec})
	bind := storagev1.VolumeBindingWaitForFirstConsumer
	del := corev1.PersistentVolumeReclaimDelete
	params := o.scParams
	if params == nil {
		params = map[string]string{"type": "dir"}
	}
	e.apply(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: e.sc}, Provisioner: e.name,
		Parameters: params, VolumeBindingMode: &bind, ReclaimPolicy: &del, AllowVolumeExpansion: ptr.To(true)})

	sock := "unix://" + filepath.Join(e.dir, "csi.sock")
	args := []string{"driver", "--endpoint", sock, "--node-id", e.node, "--state-dir", filepath.Join(e.dir, "state"),
		"--drivername", e.name, "--call-log", e.callLog, "--plugin-registration-dir", filepath.Join(e.root, "plugins_registry")}
	if o.attachRequired {
		args = append(args, "--attach-required")
	}
	for _, f := range o.faults {
		args = append(args, "--fault", f)
	}
	if o.nodeProxy {
		proxySock := filepath.Join(e.dir, "proxy.sock")
		e.proxy = startNodeProxy(t, proxySock, sock)
		args = append(args, "--kubelet-registration-path", proxySock)
	}
	start := func(args ...string) *framework.Process {
		if o.verbosity != "" {
			args = append(args, "-v", o.verbosity)
		}
		p := framework.StartKubevol(t, args...)
		e.procs = append(e.procs, p)
		return p
	}
	e.driver = start(append(args, o.driverArgs...)...)
	e.prov = start("provisioner", "--csi-address", sock, "--kubeconfig", e.runAs("provisioner", framework.Provisioner, o.readSecrets), "--retry-interval-start", "200ms", "--retry-interval-max", "2s")
	if o.attachRequired {
		start("attacher", "--csi-address", sock, "--kubeconfig", e.runAs("attacher", framework.Attacher, o.readSecrets), "--retry-interval-start", "200ms", "--retry-interval-max", "2s")
	}
	if o.resizer {
		start("resizer", "--csi-address", sock, "--kubeconfig", e.runAs("resizer", framework.Resizer, o.readSecrets), "--retry-interval-start", "200ms", "--retry-interval-max", "2s")
	}
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	e.metrics = "http://" + addr + "/metrics"
	// The agent runs as its node, with nothing but what the Node authorizer grants.
	agentArgs := []string{"node", "--node-name", e.node, "--root-dir", e.root, "--metrics-address", addr, "--register-with-taints="}
	if o.apiProxy {
		e.api = framework.StartAPIProxy(t, "system:node:"+e.node, "system:nodes", "system:authenticated")
		agentArgs = append(agentArgs, "--kubeconfig", e.api.Kubeconfig(t))
	} else {
		agentArgs = append(agentArgs, framework.NodeCredentialArgs(t)...)
	}
	if o.verbosity == "" {
		agentArgs = append(agentArgs, "-v", "4")
	}
	switch {
	case o.republish:
		agentArgs = append(agentArgs, "--sync-frequency", "1s")
	case o.resizer:
		// A node may not watch claims: it reads them again every --sync-frequency (1 min by
		// default, the kubelet's pod sync) to learn that a volume grew.
		agentArgs = append(agentArgs, "--sync-frequency", "2s")
	}
	e.agent = start(append(agentArgs, o.agentArgs...)...)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.cs.CoreV1().Nodes().Delete(ctx, e.node, metav1.DeleteOptions{})
		_ = e.cs.StorageV1().CSINodes().Delete(ctx, e.node, metav1.DeleteOptions{})
	})
	return e
}

func (e *env) apply(obj any) {
	e.t.Helper()
	var err error
	switch o := obj.(type) {
	case *storagev1.CSIDriver:
		_, err = e.cs.StorageV1().CSIDrivers().Create(e.ctx, o, metav1.CreateOptions{})
		e.t.Cleanup(func() { _ = e.cs.StorageV1().CSIDrivers().Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
	case *storagev1.StorageClass:
		_, err = e.cs.StorageV1().StorageClasses().Create(e.ctx, o, metav1.CreateOptions{})
		e.t.Cleanup(func() {
			_ = e.cs.StorageV1().StorageClasses().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// waitRegistered waits for the node agent to publish the driver in the CSINode.
func (e *env) waitRegistered() {
	e.t.Helper()
	e.poll("the driver in CSINode "+e.node, func(ctx context.Context) (bool, error) {
		cn, err := e.cs.StorageV1().CSINodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == e.name && d.NodeID == e.node && len(d.TopologyKeys) == 1 && d.TopologyKeys[0] == driver.TopologyKey {
				return true, nil
			}
		}
		return false, nil
	})
	// The Node carries the driver's node ID and topology, as the kubelet publishes them.
	node, err := e.cs.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if want := fmt.Sprintf(`{%q:%q}`, e.name, e.node); node.Annotations["csi.volume.kubernetes.io/nodeid"] != want {
		e.t.Errorf("node annotation csi.volume.kubernetes.io/nodeid = %q, want %q", node.Annotations["csi.volume.kubernetes.io/nodeid"], want)
	}
	if node.Labels[driver.TopologyKey] != e.node {
		e.t.Errorf("node label %s = %q, want %q", driver.TopologyKey, node.Labels[driver.TopologyKey], e.node)
	}
}

func (e *env) poll(what string, cond wait.ConditionWithContextFunc) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 3*time.Minute, true, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (e *env) pvc(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	return e.pvcOf(name, "16Mi", corev1.PersistentVolumeFilesystem)
}

// pvcOf creates a claim of the given size and volume mode in the test's StorageClass.
func (e *env) pvcOf(name, size string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &e.sc,
			VolumeMode:       &mode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pvc
}

// boundPV returns the PV the claim is bound to.
func (e *env) boundPV(claim string) *corev1.PersistentVolume {
	e.t.Helper()
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(e.ctx, claim, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pv
}

// pod is a pod with the given volumes mounted, kept on this test's node by its hostname
// label; the scheduler places it (and so drives WaitForFirstConsumer provisioning).
func (e *env) pod(name string, vols ...corev1.Volume) *corev1.Pod {
	e.t.Helper()
	return e.podWith(name, vols, nil)
}

// podWith is a pod with mounts mounted and devices used as raw block devices
// (volumeDevices).
func (e *env) podWith(name string, mounts, devices []corev1.Volume) *corev1.Pod {
	e.t.Helper()
	return e.create(e.podObject(name, mounts, devices))
}

// create creates the pod.
func (e *env) create(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	created, err := kubecheck.CreatePod(e.ctx, e.cs, e.ns, pod, 3*time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

// podObject is a pod on the env's node whose one container mounts mounts and maps devices.
func (e *env) podObject(name string, mounts, devices []corev1.Volume) *corev1.Pod {
	return kubecheck.VolumePod(e.ns, name, e.node, "busybox", mounts, devices)
}

// waitVolumesReady waits for the agent's kubevol.io/VolumesReady condition.
func (e *env) waitVolumesReady(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	cur, err := kubecheck.WaitPod(e.ctx, e.cs, e.ns, pod.Name, 3*time.Minute, kubecheck.VolumesReadyTrue)
	if err != nil {
		e.t.Fatal(err)
	}
	return cur
}

// deletePod deletes the pod and waits for the agent to finish its deletion, which it does
// only once the volumes are torn down.
func (e *env) deletePod(pod *corev1.Pod) {
	e.t.Helper()
	if err := kubecheck.DeletePod(e.ctx, e.cs, e.ns, pod.Name, 3*time.Minute); err != nil {
		e.t.Fatal(err)
	}
}

// deleteClaim deletes the PVC and waits for its PV to be deleted (reclaim policy Delete).
func (e *env) deleteClaim(name, pv string) {
	e.t.Helper()
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if err := kubecheck.WaitPVGone(e.ctx, e.cs, pv, 3*time.Minute); err != nil {
		e.t.Fatal(err)
	}
}

type call struct {
	Method         string `json:"method"`
	VolumeID       string `json:"volumeID"`
	Code           string `json:"code"`
	Path           string `json:"path"`
	SELinuxContext string `json:"seLinuxContext"`
}

// calls reads the driver's call log.
func (e *env) calls() []call {
	e.t.Helper()
	f, err := os.Open(e.callLog)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	var out []call
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c call
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// succeeded lists the methods that succeeded on volumeID, in call-log order.
func (e *env) succeeded(volumeID string) []string {
	var out []string
	for _, c := range e.calls() {
		if c.VolumeID == volumeID && c.Code == "OK" {
			out = append(out, c.Method)
		}
	}
	return out
}

// unmountLeftovers fails the test for any mount or loop device still held below the test's
// directory and releases it, so nothing leaks even when the test fails early.
func (e *env) unmountLeftovers() {
	left, err := drivertest.Leftovers(e.dir)
	if err != nil {
		e.t.Errorf("listing leftovers: %v", err)
	}
	for _, l := range left {
		if !e.t.Failed() { // after a failure, leftovers are expected; they are released
			e.t.Errorf("leaked: %s", l)
		}
	}
	if err := drivertest.Release(e.dir); err != nil {
		e.t.Errorf("releasing leftovers: %v", err)
	}
}

func isMountPoint(path string) bool {
	notMnt, err := mount.New("").IsLikelyNotMountPoint(path)
	return err == nil && !notMnt
}

// runAs returns the kubeconfig of component's own ServiceAccount, bound to deploy/'s RBAC
// (plus `get` on secrets when secrets is true).
func (e *env) runAs(name string, c framework.Component, secrets bool) string {
	if secrets {
		return framework.RunAsReadingSecrets(e.ctx, e.t, e.ns, name, c)
	}
	return framework.RunAs(e.ctx, e.t, e.ns, name, c)
}
