package snapshotter

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// env is one test's world: a driver with its own name, node and directory, the provisioner,
// the snapshotter and, with agent, the node agent.
type env struct {
	t    *testing.T
	ctx  context.Context
	cs   kubernetes.Interface
	snap snapclient.Interface
	// snapshotterKC is the kubeconfig of the snapshotter's ServiceAccount, made on its first start.
	snapshotterKC string
	ns            string
	driver        string
	node          string
	dir           string
	root          string // the agent's --root-dir
	sc            string // StorageClass of the driver
	class         string // default VolumeSnapshotClass of the driver
	socket        string
	conn          *csiclient.Conn
	// snapshotter is the `kubevol snapshotter` process (nil with envOptions.noSnapshotter
	// or upstreamRBAC).
	snapshotter *framework.Process
	// procs are the env's kubevol processes, for their logs.
	procs []*framework.Process
	// upstream holds upstream's rules of each sidecar with envOptions.upstreamRBAC.
	upstream map[framework.Component]framework.Rules
}

type envOptions struct {
	// agent runs the node agent (pods mount their volumes); else the driver runs as a
	// controller only and the Node and CSINode are made by the test.
	agent bool
	// snapshotterArgs are extra flags of `kubevol snapshotter`.
	snapshotterArgs []string
	// noSnapshotter leaves the snapshotter to the test.
	noSnapshotter bool
	// driverArgs are extra flags of the controller driver (without agent).
	driverArgs []string
	// attach (with agent) makes the CSIDriver require attachment and runs `kubevol
	// attacher`.
	attach bool
	// resizer runs `kubevol resizer`; the StorageClass allows expansion.
	resizer bool
	// upstreamRBAC binds each sidecar's ServiceAccount to upstream's rule files alone
	// (framework.UpstreamRules) instead of deploy/'s, and runs the snapshotter's two roles
	// as upstream ships them: csi-snapshotter and snapshot-controller, each a process with
	// its own ServiceAccount.
	upstreamRBAC bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	id := strings.ToLower(rand.String(6))
	e := &env{t: t, ctx: framework.Context(t, 5*time.Minute), cs: framework.Client(t), ns: framework.Namespace(t),
		driver: "snap-" + id + ".kubevol.io", node: "snap-node-" + id}
	e.snap = framework.SnapshotClient(t)
	if o.upstreamRBAC {
		e.upstream = framework.UpstreamRules(t)
	}
	framework.InstallSnapshotCRDs(e.ctx, t)
	e.dir = drivertest.TempDir(t)
	e.root = filepath.Join(e.dir, "root")
	e.socket = "unix://" + filepath.Join(e.dir, "csi.sock")
	bind := storagev1.VolumeBindingImmediate
	if o.agent {
		bind = storagev1.VolumeBindingWaitForFirstConsumer
		_, err := e.cs.StorageV1().CSIDrivers().Create(e.ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: e.driver},
			Spec: storagev1.CSIDriverSpec{AttachRequired: &o.attach}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.cs.StorageV1().CSIDrivers().Delete(context.Background(), e.driver, metav1.DeleteOptions{})
		})
		args := []string{"driver", "--endpoint", e.socket, "--node-id", e.node, "--state-dir", filepath.Join(e.dir, "state"),
			"--drivername", e.driver, "--plugin-registration-dir", filepath.Join(e.root, "plugins_registry")}
		if o.attach {
			args = append(args, "--attach-required")
		}
		e.start(args...)
		conn, err := csiclient.Dial(csiclient.Config{Address: e.socket, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e.conn = conn
		t.Cleanup(func() { conn.Close() })
		if err := conn.ProbeForever(e.ctx); err != nil {
			t.Fatal(err)
		}
		// The agent runs as its node (a CSR, as kubevol up's), on a Node that takes the
		// test's pods: no companion taint.
		agent := append([]string{"node", "--node-name", e.node, "--root-dir", e.root, "--metrics-address", framework.FreeAddr(t),
			"--register-with-taints="}, framework.NodeCredentialArgs(t)...)
		if o.resizer {
			// A node may not watch claims: it reads them again every --sync-frequency.
			agent = append(agent, "--sync-frequency", "2s")
		}
		e.start(agent...)
		t.Cleanup(func() {
			_ = e.cs.CoreV1().Nodes().Delete(context.Background(), e.node, metav1.DeleteOptions{})
			_ = e.cs.StorageV1().CSINodes().Delete(context.Background(), e.node, metav1.DeleteOptions{})
		})
	} else {
		framework.CreateNode(e.ctx, t, e.cs, e.node, e.driver)
		e.conn = framework.StartControllerDriver(e.ctx, t, e.dir, e.driver, e.node, o.driverArgs...).Conn
	}
	e.sc = framework.CreateStorageClass(e.ctx, t, e.cs, &storagev1.StorageClass{Provisioner: e.driver, VolumeBindingMode: &bind,
		Parameters: map[string]string{"type": "dir"}, AllowVolumeExpansion: &o.resizer}).Name
	e.class = e.snapshotClass(e.driver, snapv1.VolumeSnapshotContentDelete, nil, true)
	fast := []string{"--csi-address", e.socket, "--retry-interval-start", "200ms", "--retry-interval-max", "2s"}
	e.start(append([]string{"provisioner", "--kubeconfig", e.kubeconfig("provisioner", framework.Provisioner)}, fast...)...)
	if o.attach {
		e.start(append([]string{"attacher", "--kubeconfig", e.kubeconfig("attacher", framework.Attacher)}, fast...)...)
	}
	if o.resizer {
		e.start(append([]string{"resizer", "--kubeconfig", e.kubeconfig("resizer", framework.Resizer)}, fast...)...)
	}
	switch {
	case o.upstreamRBAC:
		// As upstream ships them: the sidecar beside the driver, the controller alone.
		e.start(append([]string{"csi-snapshotter", "--kubeconfig", e.kubeconfig("csi-snapshotter", framework.CSISnapshotter)}, fast...)...)
		e.start("snapshot-controller", "--kubeconfig", e.kubeconfig("snapshot-controller", framework.SnapshotController),
			"--retry-interval-start", "200ms", "--retry-interval-max", "2s")
	case !o.noSnapshotter:
		e.snapshotter = e.startSnapshotter(o.snapshotterArgs...)
	}
	// Registered after the processes, so it runs before they stop: every snapshot of the
	// test is deleted while its snapshotter still runs.
	t.Cleanup(e.deleteAllSnapshots)
	return e
}

// start runs a kubevol process of the env.
func (e *env) start(args ...string) *framework.Process {
	p := framework.StartKubevol(e.t, args...)
	e.procs = append(e.procs, p)
	return p
}

// kubeconfig is the kubeconfig of a ServiceAccount named name bound to the RBAC of c:
// deploy/'s, or upstream's with envOptions.upstreamRBAC.
func (e *env) kubeconfig(name string, c framework.Component) string {
	if e.upstream != nil {
		return framework.RunWithRules(e.ctx, e.t, e.ns, name, e.upstream[c])
	}
	return framework.RunAs(e.ctx, e.t, e.ns, name, c)
}

// startSnapshotter runs `kubevol snapshotter` for this driver with fast retries.
func (e *env) startSnapshotter(args ...string) *framework.Process {
	if e.snapshotterKC == "" {
		// One process runs both roles, so its ServiceAccount has both roles' rights.
		e.snapshotterKC = framework.RunAs(e.ctx, e.t, e.ns, "snapshotter", framework.SnapshotController, framework.CSISnapshotter)
	}
	return framework.StartKubevol(e.t, append([]string{"snapshotter", "--csi-address", e.socket, "--kubeconfig", e.snapshotterKC,
		"--retry-interval-start", "100ms", "--retry-interval-max", "2s", "-v", "3"}, args...)...)
}

// scrape returns the /metrics page served at addr.
func scrape(t testing.TB, addr string) string {
	t.Helper()
	return framework.Get(t, "http://"+addr+"/metrics")
}

// snapshotClass creates a VolumeSnapshotClass (deleted at the end of the test).
func (e *env) snapshotClass(driver string, policy snapv1.DeletionPolicy, params map[string]string, isDefault bool) string {
	e.t.Helper()
	class := &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "vsclass-"}, Driver: driver, DeletionPolicy: policy, Parameters: params}
	if isDefault {
		class.Annotations = map[string]string{snapshotter.AnnDefaultClass: "true"}
	}
	out, err := e.snap.SnapshotV1().VolumeSnapshotClasses().Create(e.ctx, class, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.snap.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), out.Name, metav1.DeleteOptions{})
	})
	return out.Name
}

// claim creates a claim of the driver's StorageClass, with an optional data source.
func (e *env) claim(name, size string, source *snapv1.VolumeSnapshot) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc := framework.ClaimSpec(name, e.sc, size)
	if source != nil {
		group := snapv1.GroupName
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: source.Name}
	}
	out, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) waitBound(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := kubecheck.WaitForClaim(e.ctx, e.cs, e.ns, name, 2*time.Minute, func(p *corev1.PersistentVolumeClaim) bool { return p.Status.Phase == corev1.ClaimBound })
	if err != nil {
		e.t.Fatalf("claim %s not bound: %v; events:\n%s", name, err, strings.Join(e.events(name), "\n"))
	}
	return pvc
}

// snapshotOf creates a VolumeSnapshot of claim, with class (nil: the default).
func (e *env) snapshotOf(name, claim string, class *string) *snapv1.VolumeSnapshot {
	e.t.Helper()
	vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}, VolumeSnapshotClassName: class}}
	out, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Create(e.ctx, vs, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitSnapshot waits until cond holds for the snapshot and returns it.
func (e *env) waitSnapshot(name, what string, cond func(*snapv1.VolumeSnapshot) bool) *snapv1.VolumeSnapshot {
	e.t.Helper()
	var last *snapv1.VolumeSnapshot
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		vs, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = vs
		return cond(vs), nil
	})
	if err != nil {
		e.t.Fatalf("snapshot %s never %s: %v; last: %+v; events:\n%s", name, what, err, last, strings.Join(e.events(name), "\n"))
	}
	return last
}

func (e *env) waitReady(name string) *snapv1.VolumeSnapshot {
	e.t.Helper()
	return e.waitSnapshot(name, "ready", func(vs *snapv1.VolumeSnapshot) bool {
		return vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false)
	})
}

// waitGone waits until get says NotFound.
func (e *env) waitGone(what string, get func(context.Context) error) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		e.t.Fatalf("%s not deleted: %v", what, err)
	}
}

func (e *env) waitSnapshotGone(name string) {
	e.t.Helper()
	e.waitGone("VolumeSnapshot "+name, func(ctx context.Context) error {
		_, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

func (e *env) waitContentGone(name string) {
	e.t.Helper()
	e.waitGone("VolumeSnapshotContent "+name, func(ctx context.Context) error {
		_, err := e.snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

func (e *env) content(name string) *snapv1.VolumeSnapshotContent {
	e.t.Helper()
	c, err := e.snap.SnapshotV1().VolumeSnapshotContents().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// backendSnapshots lists the driver's snapshots by ID.
func (e *env) backendSnapshots() map[string]*csi.Snapshot {
	e.t.Helper()
	out := map[string]*csi.Snapshot{}
	token := ""
	for {
		cctx, cancel := e.conn.WithTimeout(e.ctx)
		rsp, err := e.conn.Controller.ListSnapshots(cctx, &csi.ListSnapshotsRequest{StartingToken: token})
		cancel()
		if err != nil {
			e.t.Fatalf("ListSnapshots: %v", err)
		}
		for _, en := range rsp.GetEntries() {
			out[en.GetSnapshot().GetSnapshotId()] = en.GetSnapshot()
		}
		if token = rsp.GetNextToken(); token == "" {
			return out
		}
	}
}

// events returns "reason: message" lines of the object's events in the test namespace
// (cluster-scoped objects' events are in "default").
func (e *env) events(name string) []string {
	line := func(ev corev1.Event) string { return ev.Source.Component + ": " + ev.Reason + ": " + ev.Message }
	return append(kubecheck.EventLines(e.cs, e.ns, name, line), kubecheck.EventLines(e.cs, metav1.NamespaceDefault, name, line)...)
}

func (e *env) waitEvent(ns, name, reason, contains string) {
	e.t.Helper()
	framework.WaitForEvent(e.ctx, e.t, e.cs, ns, name, reason+" event for "+name, time.Minute, kubecheck.EventWith(reason, contains))
}

// deleteAllSnapshots deletes the test's snapshots and waits until they are gone, with the
// snapshotter still running.
func (e *env) deleteAllSnapshots() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = e.snap.SnapshotV1().VolumeSnapshots(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		l, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil && !e.t.Failed() {
		e.t.Errorf("snapshots of %s not deleted at the end: %v", e.ns, err)
	}
	// Retained contents of this driver would outlive the test: remove them.
	all, _ := e.snap.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
	for _, c := range all.Items {
		if c.Spec.Driver == e.driver {
			_ = e.snap.SnapshotV1().VolumeSnapshotContents().Delete(ctx, c.Name, metav1.DeleteOptions{})
		}
	}
}

// podOn is a pod on the env's node that mounts claim at /data.
func (e *env) podOn(name, claim string) *corev1.Pod {
	e.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: e.node},
			Containers:   []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:      []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	var created *corev1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil // the default ServiceAccount may not exist yet
	})
	if err != nil {
		e.t.Fatalf("create pod %s: %v", name, err)
	}
	e.t.Cleanup(func() { e.deletePod(name) })
	return created
}

// mountOf waits until the agent reports the pod's volumes ready and returns where its claim
// is mounted on this machine.
func (e *env) mountOf(pod *corev1.Pod) string {
	e.t.Helper()
	var cur *corev1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if cur, err = e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == "kubevol.io/VolumesReady" && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("volumes of pod %s not ready: %v; events:\n%s", pod.Name, err, strings.Join(e.events(pod.Name), "\n"))
	}
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(e.ctx, pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return filepath.Join(volume.Paths{Root: e.root}.PodVolumeDir(cur.UID, "kubernetes.io/csi", pvc.Spec.VolumeName), "mount")
}

// deletePod deletes the pod and waits until the agent has torn its volumes down.
func (e *env) deletePod(name string) {
	ctx := context.Background()
	if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, name, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
		return
	}
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// notFound lets waitGone wait for any condition.
var notFound = apierrors.NewNotFound(schema.GroupResource{}, "")

func (e *env) pvOf(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	e.t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pv
}
