package resizer

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
	"github.com/kubevol/kubevol/internal/testing/kubefake"
)

// modifyDriver adds ControllerModifyVolume and MODIFY_VOLUME to fakeDriver.
type modifyDriver struct {
	*fakeDriver

	mu       sync.Mutex
	modifies []*csi.ControllerModifyVolumeRequest
	answer   func(*csi.ControllerModifyVolumeRequest) error
	// modifying is set while a ControllerModifyVolume runs; an expansion that starts
	// meanwhile counts as overlapping.
	modifying   atomic.Bool
	overlapping atomic.Int32
}

func newModifyDriver() *modifyDriver {
	d := &modifyDriver{fakeDriver: newFakeDriver(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, expandCapability, modifyCapability)}
	d.fakeDriver.setRespond(func(req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
		if d.modifying.Load() {
			d.overlapping.Add(1)
		}
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
	})
	return d
}

func (d *modifyDriver) ControllerModifyVolume(_ context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	d.modifying.Store(true)
	defer d.modifying.Store(false)
	d.mu.Lock()
	d.modifies = append(d.modifies, req)
	answer := d.answer
	d.mu.Unlock()
	if answer != nil {
		if err := answer(req); err != nil {
			return nil, err
		}
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

func (d *modifyDriver) setAnswer(f func(*csi.ControllerModifyVolumeRequest) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answer = f
}

// calls returns the value of key in the parameters of each ControllerModifyVolume so far.
func (d *modifyDriver) calls(key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, r := range d.modifies {
		out = append(out, r.GetMutableParameters()[key])
	}
	return out
}

func (d *modifyDriver) last() *csi.ControllerModifyVolumeRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.modifies) == 0 {
		return nil
	}
	return d.modifies[len(d.modifies)-1]
}

// startModify runs a Controller with modification on against the fake clientset.
func startModify(t *testing.T, drv *modifyDriver, cfg ModifyConfig, retryMax time.Duration, objs ...runtime.Object) *env {
	t.Helper()
	return startConfig(t, drv, Config{ControllerConfig: sidecar.ControllerConfig{RetryIntervalMax: retryMax}, Modify: cfg}, objs...)
}

// startConfig runs a Controller of cfg (its client, driver and workers filled in) against
// the fake clientset, which applies updates and patches as the apiserver does.
func startConfig(t *testing.T, drv *modifyDriver, cfg Config, objs ...runtime.Object) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := csiclient.Dial(csiclient.Config{Address: csitest.StartAs(t, drv.Driver, drv).Address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, cs: fake.NewClientset(objs...), drv: drv.fakeDriver}
	kubefake.WithResourceVersions(e.cs)
	cfg.Client, cfg.CSI, cfg.DriverName, cfg.Workers, cfg.RetryIntervalStart = e.cs, conn, driverName, 2, 10*time.Millisecond
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return e
}

func class(name string, params map[string]string) *storagev1.VolumeAttributesClass {
	return &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: driverName, Parameters: params}
}

// modifiedTo reports whether the claim reached class: current, nothing in progress, no
// modify condition.
func modifiedTo(class string) func(*corev1.PersistentVolumeClaim) bool {
	return func(c *corev1.PersistentVolumeClaim) bool {
		return ptr.Deref(c.Status.CurrentVolumeAttributesClassName, "") == class && c.Status.ModifyVolumeStatus == nil &&
			condition(c, corev1.PersistentVolumeClaimVolumeModifyingVolume) == nil && condition(c, corev1.PersistentVolumeClaimVolumeModifyVolumeError) == nil
	}
}

func (e *env) setClass(name, class string) {
	e.t.Helper()
	pvc := e.claim(name)
	pvc.Spec.VolumeAttributesClassName = ptr.To(class)
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(ns).Update(e.ctx, pvc, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pvClass(name string) string {
	e.t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return ptr.Deref(pv.Spec.VolumeAttributesClassName, "")
}

// A claim that names a class gets ControllerModifyVolume with its parameters, the claim's
// metadata (--extra-modify-metadata) and the PV's controller-modify secret; then the PV and
// the claim's status name the class.
func TestModifyVolume(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Annotations = map[string]string{pvspec.AnnModifySecretName: "modify", pvspec.AnnModifySecretNamespace: "secrets"}
		pv.Spec.CSI.ControllerExpandSecretRef = &corev1.SecretReference{Name: "expand", Namespace: "secrets"}
	})
	pvc.Spec.VolumeAttributesClassName = ptr.To("gold")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "modify", Namespace: "secrets"}, Data: map[string][]byte{"key": []byte("m0dify")}}
	drv := newModifyDriver()
	e := newSyncEnv(t, drv, Config{Modify: ModifyConfig{Enabled: true, ExtraMetadata: true}}, pvc, pv, secret, class("gold", map[string]string{"iops": "3000"}))

	if err := e.modify("data"); err != nil {
		t.Fatal(err)
	}
	if got := e.claim("data"); !modifiedTo("gold")(got) {
		t.Fatalf("claim not modified to gold by its sync: %+v", got.Status)
	}
	if got := e.pvClass("pv-data"); got != "gold" {
		t.Errorf("PV class = %q, want gold", got)
	}
	req := drv.last()
	want := map[string]string{"iops": "3000", paramPVCName: "data", paramPVCNamespace: ns, paramPVName: "pv-data"}
	if req.GetVolumeId() != "vol-data" || !maps.Equal(req.GetMutableParameters(), want) || req.GetSecrets()["key"] != "m0dify" {
		t.Errorf("request = %v, want parameters %v and the modify secret", req, want)
	}
	e.sawEvent(reasonModify, "with vac gold")
	e.sawEvent(reasonModified, "with vac gold successfully")
	// Done means done: no further call, from either queue.
	if err := e.modify("data"); err != nil {
		t.Fatal(err)
	}
	if err := e.expand("data"); err != nil {
		t.Fatal(err)
	}
	if n := len(drv.calls("iops")); n != 1 {
		t.Errorf("%d ControllerModifyVolume calls, want 1", n)
	}
}

// A class that does not exist yet leaves the claim Pending, without a call; its creation
// starts the modification at once: the class's add handler queues the claim.
func TestModifyPendingClass(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", nil)
	pvc.Spec.VolumeAttributesClassName = ptr.To("later")
	drv := newModifyDriver()
	e := newSyncEnv(t, drv, Config{Modify: ModifyConfig{Enabled: true}}, pvc, pv)

	got := e.modifyUntil("data", "Pending", 1, func(c *corev1.PersistentVolumeClaim) bool {
		return c.Status.ModifyVolumeStatus != nil && c.Status.ModifyVolumeStatus.Status == corev1.PersistentVolumeClaimModifyVolumePending
	})
	if got.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName != "later" {
		t.Errorf("target = %q, want later", got.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName)
	}
	e.sawEvent(reasonModifyFailed, `VAC "later" does not exist.`)
	if n := len(drv.calls("tier")); n != 0 {
		t.Fatalf("%d calls before the class exists", n)
	}
	e.f.Add(class("later", map[string]string{"tier": "fast"}))
	if n := e.c.mod.queue.Len(); n != 0 {
		t.Fatalf("%d claims queued before the class's add handler ran", n)
	}
	e.c.enqueueClaimsOfClass("later")
	if n := e.c.mod.queue.Len(); n != 1 {
		t.Fatalf("%d claims queued by the class's creation, want its claim", n)
	}
	e.modifyUntil("data", "modified to later", 1, modifiedTo("later"))
	if got := drv.calls("tier"); !slices.Equal(got, []string{"fast"}) {
		t.Errorf("calls = %v", got)
	}
}

// INVALID_ARGUMENT makes the class Infeasible, with the error condition, and the same class
// is not asked for again before --retry-interval-max; going back to the current class is
// a rollback the driver is asked for, after which nothing is left of the failure.
func TestModifyInfeasibleRollback(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", func(pv *corev1.PersistentVolume) { pv.Spec.VolumeAttributesClassName = ptr.To("gold") })
	pvc.Spec.VolumeAttributesClassName = ptr.To("bad")
	pvc.Status.CurrentVolumeAttributesClassName = ptr.To("gold")
	drv := newModifyDriver()
	drv.setAnswer(func(r *csi.ControllerModifyVolumeRequest) error {
		if r.GetMutableParameters()["tier"] == "nope" {
			return status.Error(codes.InvalidArgument, "tier nope unknown")
		}
		return nil
	})
	e := newSyncEnv(t, drv, Config{Modify: ModifyConfig{Enabled: true}}, pvc, pv, class("gold", map[string]string{"tier": "gold"}), class("bad", map[string]string{"tier": "nope"}))

	if err := e.modify("data"); err == nil {
		t.Fatal("the sync of a refused modification succeeded")
	}
	got := e.claim("data")
	if got.Status.ModifyVolumeStatus == nil || got.Status.ModifyVolumeStatus.Status != corev1.PersistentVolumeClaimModifyVolumeInfeasible {
		t.Fatalf("status %+v, want Infeasible", got.Status)
	}
	if got.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName != "bad" || ptr.Deref(got.Status.CurrentVolumeAttributesClassName, "") != "gold" {
		t.Errorf("status = %+v, want target bad and current gold", got.Status)
	}
	cond := condition(got, corev1.PersistentVolumeClaimVolumeModifyVolumeError)
	if cond == nil || cond.Message != "ModifyVolume failed with error: rpc error: code = InvalidArgument desc = tier nope unknown. Waiting for retry." {
		t.Errorf("ModifyVolumeError condition = %+v", cond)
	}
	if condition(got, corev1.PersistentVolumeClaimVolumeModifyingVolume) != nil {
		t.Error("ModifyingVolume stayed next to the error condition")
	}
	e.sawEvent(reasonModifyFailed, "tier nope unknown")
	// No hot loop: a resync or an unrelated change does not ask the driver again before
	// --retry-interval-max (an hour, the default's order).
	e.setRequest("data", "1Gi")
	for range 3 {
		_ = e.modify("data")
	}
	if got := drv.calls("tier"); !slices.Equal(got, []string{"nope"}) {
		t.Fatalf("calls = %v, want the one refused", got)
	}
	if e.pvClass("pv-data") != "gold" {
		t.Error("the PV's class changed with an infeasible modification")
	}

	e.setClass("data", "gold")
	if err := e.modify("data"); err != nil {
		t.Fatal(err)
	}
	if got := e.claim("data"); !modifiedTo("gold")(got) {
		t.Fatalf("claim not rolled back to gold: %+v", got.Status)
	}
	if got := drv.calls("tier"); !slices.Equal(got, []string{"nope", "gold"}) {
		t.Errorf("calls = %v, want the refused one and the rollback", got)
	}
}

// A call that may still run in the driver (DEADLINE_EXCEEDED) keeps its target: the class
// the user asks for next is applied only once the first one was confirmed. A final error
// lets the target follow the claim.
func TestModifyUncertainKeepsTarget(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", nil)
	pvc.Spec.VolumeAttributesClassName = ptr.To("silver")
	drv := newModifyDriver()
	var failures atomic.Int32
	drv.setAnswer(func(r *csi.ControllerModifyVolumeRequest) error {
		switch r.GetMutableParameters()["tier"] {
		case "silver":
			if failures.Add(1) == 1 {
				return status.Error(codes.DeadlineExceeded, "slow backend")
			}
		case "bronze":
			return status.Error(codes.Internal, "bronze broke")
		}
		return nil
	})
	e := newSyncEnv(t, drv, Config{Modify: ModifyConfig{Enabled: true}}, pvc, pv,
		class("silver", map[string]string{"tier": "silver"}), class("gold", map[string]string{"tier": "gold"}), class("bronze", map[string]string{"tier": "bronze"}))

	if err := e.modify("data"); err == nil {
		t.Fatal("the sync of a call that timed out succeeded")
	}
	if got := e.claim("data").Status.ModifyVolumeStatus; got == nil || got.Status != corev1.PersistentVolumeClaimModifyVolumeInProgress || got.TargetVolumeAttributesClassName != "silver" {
		t.Fatalf("modifyVolumeStatus %+v, want InProgress to silver", got)
	}
	e.setClass("data", "gold")
	e.modifyUntil("data", "modified to gold", 3, modifiedTo("gold"))
	// silver again until it worked, and only then gold.
	if got := drv.calls("tier"); !slices.Equal(got, []string{"silver", "silver", "gold"}) {
		t.Errorf("calls = %v, want silver finished before gold", got)
	}
	e.sawEvent(reasonModifyFailed, "Still modifying to VAC silver")

	// A final error: InProgress with the error, and the next class replaces the target.
	e.setClass("data", "bronze")
	e.modifyUntil("data", "failing on bronze", 1, func(c *corev1.PersistentVolumeClaim) bool {
		return condition(c, corev1.PersistentVolumeClaimVolumeModifyVolumeError) != nil && c.Status.ModifyVolumeStatus != nil &&
			c.Status.ModifyVolumeStatus.Status == corev1.PersistentVolumeClaimModifyVolumeInProgress
	})
	e.setClass("data", "silver")
	e.modifyUntil("data", "modified to silver", 1, modifiedTo("silver"))
}

// Expansion and modification of one claim never call the driver at the same time. An
// informer-level test on purpose: it is about two queues' workers meeting on one claim.
func TestModifyAndExpandSerialised(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", nil)
	drv := newModifyDriver()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	drv.setAnswer(func(*csi.ControllerModifyVolumeRequest) error {
		entered <- struct{}{}
		<-release
		return nil
	})
	e := startModify(t, drv, ModifyConfig{Enabled: true}, time.Second, pvc, pv, class("gold", map[string]string{"tier": "gold"}))
	e.setClass("data", "gold")
	<-entered
	e.setRequest("data", "2Gi")
	// The expansion's worker waits on the claim's lock, which the modification holds.
	e.waitFor("the expansion waiting for the claim", func() bool {
		e.c.locks.mu.Lock()
		defer e.c.locks.mu.Unlock()
		return e.c.locks.locks[ns+"/data"] != nil && e.c.locks.locks[ns+"/data"].users == 2
	})
	if n := len(drv.requests()); n != 0 {
		t.Fatalf("%d expansions while the modification ran", n)
	}
	close(release)
	e.waitClaim("data", "modified and expanded", func(c *corev1.PersistentVolumeClaim) bool {
		return modifiedTo("gold")(c) && storageQ(c.Status.Capacity) == gi(2)
	})
	if n := drv.overlapping.Load(); n != 0 {
		t.Errorf("%d expansions overlapped a modification", n)
	}
}

// With the gate off, or a driver without MODIFY_VOLUME, a class on the claim is left alone.
func TestModifyOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate bool
		drv  *modifyDriver
	}{
		{"gate off", false, newModifyDriver()},
		{"no capability", true, &modifyDriver{fakeDriver: newFakeDriver()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc, pv := volume("data", driverName, "1Gi", "2Gi", nil)
			pvc.Spec.VolumeAttributesClassName = ptr.To("gold")
			e := newSyncEnv(t, tc.drv, Config{Modify: ModifyConfig{Enabled: tc.gate}}, pvc, pv, class("gold", map[string]string{"tier": "gold"}))
			// The expansion still runs, and shows the claim was looked at.
			got := e.syncUntil("data", "expanded", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
			if e.c.mod != nil {
				t.Fatal("a modification queue without the gate and the capability")
			}
			if got.Status.ModifyVolumeStatus != nil || got.Status.CurrentVolumeAttributesClassName != nil {
				t.Errorf("status = %+v, want no modification", got.Status)
			}
			if n := len(tc.drv.calls("tier")); n != 0 {
				t.Errorf("%d ControllerModifyVolume calls", n)
			}
		})
	}
}

// A resizer killed during a call leaves the claim InProgress: the next one finishes that
// target before it follows the spec, since the call may have run in the driver.
func TestModifyAfterRestartFinishesTarget(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", nil)
	pvc.Spec.VolumeAttributesClassName = ptr.To("gold")
	pvc.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{Status: corev1.PersistentVolumeClaimModifyVolumeInProgress, TargetVolumeAttributesClassName: "silver"}
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimVolumeModifyingVolume, Status: corev1.ConditionTrue, Message: modifyingMessage}}
	drv := newModifyDriver()
	e := newSyncEnv(t, drv, Config{Modify: ModifyConfig{Enabled: true}}, pvc, pv,
		class("silver", map[string]string{"tier": "silver"}), class("gold", map[string]string{"tier": "gold"}))
	e.modifyUntil("data", "modified to gold", 2, modifiedTo("gold"))
	if got := drv.calls("tier"); !slices.Equal(got, []string{"silver", "gold"}) {
		t.Errorf("calls = %v, want the interrupted silver finished, then gold", got)
	}
	if got := e.pvClass("pv-data"); got != "gold" {
		t.Errorf("PV class = %q", got)
	}
}
