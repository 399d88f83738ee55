package failover

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/resizer"
	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// timing is the leader election timing of every replica.
type timing struct{ lease, renew, retry time.Duration }

// upstreamTiming is the sidecars' defaults (csi-lib-utils): what operators run.
var upstreamTiming = timing{15 * time.Second, 10 * time.Second, 5 * time.Second}

func (t timing) flags(ns string) []string {
	return []string{"--leader-election", "--leader-election-namespace", ns,
		"--leader-election-lease-duration", t.lease.String(), "--leader-election-renew-deadline", t.renew.String(),
		"--leader-election-retry-period", t.retry.String()}
}

// The driver's calls take a moment, so that a kill finds some in flight.
const driverDelays = "CreateVolume:delay=200ms;DeleteVolume:delay=200ms;ControllerPublishVolume:delay=300ms;" +
	"ControllerUnpublishVolume:delay=200ms;ControllerExpandVolume:delay=200ms;ControllerModifyVolume:delay=200ms;" +
	"CreateSnapshot:delay=300ms;DeleteSnapshot:delay=200ms;CreateVolumeGroupSnapshot:delay=300ms"

// env is one test's world: a controller driver with one socket per replica, its Node and
// classes, and the replicas of every role, each role under the RBAC deploy/ ships for it.
type env struct {
	t       testing.TB
	ctx     context.Context
	cs      kubernetes.Interface
	snap    snapclient.Interface
	ns      string
	driver  string
	node    string
	dir     string
	callLog string
	sc      string
	vacs    [2]string
	conn    *csiclient.Conn
	timing  timing
	set     *replicaSet
}

// envOptions choose the replicas: how many of each role, and which roles run.
type envOptions struct {
	replicas int
	timing   timing
	// only, when set, runs these roles alone (by subcommand name).
	only []string
	// noDelays leaves the driver's calls at their own speed.
	noDelays bool
}

func (o envOptions) runs(role string) bool {
	if len(o.only) == 0 {
		return true
	}
	for _, r := range o.only {
		if r == role {
			return true
		}
	}
	return false
}

func newEnv(t testing.TB, timeout time.Duration, o envOptions) *env {
	t.Helper()
	id := strings.ToLower(rand.String(6))
	e := &env{t: t, ctx: framework.Context(t, timeout), cs: framework.Client(t), ns: framework.Namespace(t),
		driver: "fo-" + id + ".kubevol.io", node: "fo-node-" + id, timing: o.timing}
	e.snap = framework.SnapshotClient(t)
	framework.InstallSnapshotCRDs(e.ctx, t)
	e.dir = drivertest.TempDir(t)
	e.callLog = filepath.Join(e.dir, "calls.jsonl")
	framework.CreateNode(e.ctx, t, e.cs, e.node, e.driver)
	csiRoles := []string{"provisioner", "attacher", "resizer", "csi-snapshotter"}
	args := []string{"--call-log", e.callLog, "--attach-required"}
	if !o.noDelays {
		args = append(args, "--fault", driverDelays)
	}
	for _, r := range csiRoles {
		for slot := range o.replicas {
			args = append(args, "--extra-endpoint", "unix://"+socketPath(e.dir, r, slot))
		}
	}
	e.conn = framework.StartControllerDriver(e.ctx, t, e.dir, e.driver, e.node, args...).Conn

	yes := true
	immediate := storagev1.VolumeBindingImmediate
	e.sc = framework.CreateStorageClass(e.ctx, t, e.cs, &storagev1.StorageClass{Provisioner: e.driver,
		Parameters: map[string]string{"type": "dir"}, AllowVolumeExpansion: &yes, VolumeBindingMode: &immediate}).Name
	for i, ro := range []string{"false", "true"} {
		e.vacs[i] = framework.AttributesClass(e.ctx, t, e.cs, fmt.Sprintf("fo-%s-%d", id, i), e.driver, map[string]string{driver.MutableReadOnly: ro})
	}
	e.classes()

	e.set = newReplicaSet(e.ctx, t, e.cs, e.ns)
	common := append(o.timing.flags(e.ns), "--retry-interval-start", "200ms", "--retry-interval-max", "5s", "-v", "2")
	sockets := func(role string) func(int) string {
		return func(slot int) string { return socketPath(e.dir, role, slot) }
	}
	noSocket := func(int) string { return "" }
	start := func(name, lease string, c framework.Component, socket func(int) string) {
		if !o.runs(name) {
			return
		}
		kc := framework.RunAs(e.ctx, t, e.ns, name, c)
		e.set.add(name, lease, o.replicas, socket, append([]string{"--kubeconfig", kc}, common...)...)
	}
	sanitized := csiclient.SanitizeDriverName(e.driver)
	start("provisioner", sanitized, framework.Provisioner, sockets("provisioner"))
	start("attacher", "external-attacher-leader-"+sanitized, framework.Attacher, sockets("attacher"))
	start("resizer", resizer.LeaseName(e.driver), framework.Resizer, sockets("resizer"))
	start("csi-snapshotter", snapshotter.SidecarLease(e.driver), framework.CSISnapshotter, sockets("csi-snapshotter"))
	start("snapshot-controller", snapshotter.ControllerLease, framework.SnapshotController, noSocket)

	watchCtx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); e.set.watch(watchCtx) }()
	t.Cleanup(func() { stop(); <-done })
	// Registered after the processes: runs before they stop, so that a failed test's
	// objects are still deleted by their controllers.
	t.Cleanup(e.sweep)
	return e
}

// classes creates the driver's default VolumeSnapshotClass and VolumeGroupSnapshotClass.
func (e *env) classes() {
	vsc, err := e.snap.SnapshotV1().VolumeSnapshotClasses().Create(e.ctx, &snapv1.VolumeSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fo-", Annotations: map[string]string{snapshotter.AnnDefaultClass: "true"}},
		Driver:     e.driver, DeletionPolicy: snapv1.VolumeSnapshotContentDelete}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.snap.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), vsc.Name, metav1.DeleteOptions{})
	})
	gsc, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(e.ctx, &groupv1.VolumeGroupSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fo-", Annotations: map[string]string{snapshotter.AnnGroupDefaultClass: "true"}},
		Driver:     e.driver, DeletionPolicy: snapv1.VolumeSnapshotContentDelete}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Delete(context.Background(), gsc.Name, metav1.DeleteOptions{})
	})
}

// poll waits until cond holds; a failed read is retried, as the API may be busy.
func (e *env) poll(what string, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// gone is a poll condition that holds once get finds nothing.
func gone(get func(context.Context) error) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) { return apierrors.IsNotFound(get(ctx)), nil }
}

// sweep deletes what a failed test left: the namespace's claims and snapshots, the
// driver's attachments, and strips the finalizers of whatever is still there after a
// minute, so that nothing outlives the test.
func (e *env) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	del := metav1.DeleteOptions{}
	_ = e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).DeleteCollection(ctx, del, metav1.ListOptions{})
	_ = e.snap.SnapshotV1().VolumeSnapshots(e.ns).DeleteCollection(ctx, del, metav1.ListOptions{})
	if vas, err := e.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
		for _, va := range vas.Items {
			if va.Spec.Attacher == e.driver {
				_ = e.cs.StorageV1().VolumeAttachments().Delete(ctx, va.Name, del)
			}
		}
	}
	_ = e.cs.CoreV1().PersistentVolumeClaims(e.ns).DeleteCollection(ctx, del, metav1.ListOptions{})
	_ = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return len(e.leftovers(ctx)) == 0, nil
	})
	// What is still there is stuck: free it, as an operator would.
	if pvs, err := e.cs.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, pv := range pvs.Items {
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == e.driver {
				pv.Finalizers = nil
				_, _ = e.cs.CoreV1().PersistentVolumes().Update(context.Background(), &pv, metav1.UpdateOptions{})
				_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, del)
			}
		}
	}
	if vas, err := e.cs.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, va := range vas.Items {
			if va.Spec.Attacher == e.driver {
				va.Finalizers = nil
				_, _ = e.cs.StorageV1().VolumeAttachments().Update(context.Background(), &va, metav1.UpdateOptions{})
			}
		}
	}
	if cs, err := e.snap.SnapshotV1().VolumeSnapshotContents().List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, c := range cs.Items {
			if c.Spec.Driver == e.driver {
				c.Finalizers = nil
				_, _ = e.snap.SnapshotV1().VolumeSnapshotContents().Update(context.Background(), &c, metav1.UpdateOptions{})
				_ = e.snap.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), c.Name, del)
			}
		}
	}
	if gs, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, c := range gs.Items {
			if c.Spec.Driver == e.driver {
				c.Finalizers = nil
				_, _ = e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Update(context.Background(), &c, metav1.UpdateOptions{})
				_ = e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Delete(context.Background(), c.Name, del)
			}
		}
	}
}

// leftovers lists what of the test is still in the API: claims, snapshots and group
// snapshots of its namespace, and the driver's volumes, attachments and contents.
func (e *env) leftovers(ctx context.Context) []string {
	var out []string
	if l, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			out = append(out, "claim "+c.Name+describeStuck(c.Finalizers, c.DeletionTimestamp, claimConditions(c)))
		}
	}
	if l, err := e.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, pv := range l.Items {
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == e.driver {
				out = append(out, "PV "+pv.Name+" ("+string(pv.Status.Phase)+")"+describeStuck(pv.Finalizers, pv.DeletionTimestamp, ""))
			}
		}
	}
	if l, err := e.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
		for _, va := range l.Items {
			if va.Spec.Attacher == e.driver {
				out = append(out, fmt.Sprintf("VolumeAttachment %s (attached %v)%s", va.Name, va.Status.Attached, describeStuck(va.Finalizers, va.DeletionTimestamp, "")))
			}
		}
	}
	if l, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, vs := range l.Items {
			out = append(out, "VolumeSnapshot "+vs.Name+describeStuck(vs.Finalizers, vs.DeletionTimestamp, ""))
		}
	}
	if l, err := e.snap.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			if c.Spec.Driver == e.driver {
				out = append(out, "VolumeSnapshotContent "+c.Name+describeStuck(c.Finalizers, c.DeletionTimestamp, ""))
			}
		}
	}
	if l, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, g := range l.Items {
			out = append(out, "VolumeGroupSnapshot "+g.Name+describeStuck(g.Finalizers, g.DeletionTimestamp, ""))
		}
	}
	if l, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			if c.Spec.Driver == e.driver {
				out = append(out, "VolumeGroupSnapshotContent "+c.Name+describeStuck(c.Finalizers, c.DeletionTimestamp, ""))
			}
		}
	}
	return out
}

func describeStuck(finalizers []string, deleted *metav1.Time, conditions string) string {
	s := ""
	if deleted != nil {
		s += " deleted"
	}
	if len(finalizers) > 0 {
		s += " finalizers " + strings.Join(finalizers, ",")
	}
	return s + conditions
}

func claimConditions(c corev1.PersistentVolumeClaim) string {
	var out []string
	for _, cond := range c.Status.Conditions {
		out = append(out, string(cond.Type))
	}
	if len(out) == 0 {
		return ""
	}
	return " conditions " + strings.Join(out, ",")
}
