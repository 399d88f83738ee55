package attacher

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/attacher"
	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// env is one test's world: its own driver (with a driver name no other test uses, so the
// tests run in parallel without seeing each other's VolumeAttachments), a node, and the
// attacher process.
type env struct {
	t        *testing.T
	ctx      context.Context
	cs       kubernetes.Interface
	drv      *drivertest.Instance
	name     string // driver name
	node     string
	callLog  string
	attacher *framework.Process
}

// newEnv starts the driver and the attacher; args are more attacher flags.
func newEnv(t *testing.T, attachRequired bool, args ...string) *env {
	t.Helper()
	suffix := rand.String(6)
	e := &env{t: t, ctx: framework.Context(t, 5*time.Minute), cs: framework.Client(t), name: "e2e-" + suffix + ".kubevol.io", node: "node-" + suffix}
	e.callLog = filepath.Join(t.TempDir(), "calls.jsonl")
	e.drv = drivertest.Start(t, driver.Config{DriverName: e.name, NodeID: "csi-" + e.node, AttachRequired: attachRequired, CallLog: e.callLog})
	e.attacher = framework.StartKubevol(t, append([]string{"attacher",
		"--csi-address", e.drv.Endpoint,
		"--kubeconfig", framework.RunAs(e.ctx, t, framework.Namespace(t), "attacher", framework.Attacher),
		"--retry-interval-start", "200ms", "--retry-interval-max", "2s",
		"-v", "3"}, args...)...)
	return e
}

// registerNode creates the CSINode that the node plugin would register.
func (e *env) registerNode() {
	e.t.Helper()
	n := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: e.node},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: e.name, NodeID: "csi-" + e.node, TopologyKeys: []string{driver.TopologyKey}}}},
	}
	e.create(func() error {
		_, err := e.cs.StorageV1().CSINodes().Create(e.ctx, n, metav1.CreateOptions{})
		return err
	})
	e.t.Cleanup(func() { _ = e.cs.StorageV1().CSINodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
}

// volume creates a backend volume and a PV for it.
func (e *env) volume() *corev1.PersistentVolume {
	e.t.Helper()
	rsp, err := e.drv.Controller.CreateVolume(e.ctx, &csi.CreateVolumeRequest{
		Name:               "vol-" + rand.String(8),
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
	})
	if err != nil {
		e.t.Fatalf("CreateVolume: %v", err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + rand.String(8)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: e.name, VolumeHandle: rsp.Volume.VolumeId, FSType: "ext4", VolumeAttributes: rsp.Volume.VolumeContext,
			}},
		},
	}
	e.create(func() error {
		var err error
		pv, err = e.cs.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{})
		return err
	})
	e.t.Cleanup(func() { e.forceDeletePV(pv.Name) })
	return pv
}

// forceDeletePV removes a PV even if a failed test left our finalizer on it.
func (e *env) forceDeletePV(name string) {
	ctx := context.Background()
	_ = e.cs.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
	if pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err == nil && len(pv.Finalizers) > 0 {
		pv.Finalizers = nil
		_, _ = e.cs.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	}
}

func (e *env) attachment(pv *corev1.PersistentVolume) *storagev1.VolumeAttachment {
	e.t.Helper()
	// The attach/detach controller's name for it: csi-<sha256(handle+driver+node)>.
	name := fmt.Sprintf("csi-%x", sha256sum(pv.Spec.CSI.VolumeHandle+e.name+e.node))
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: e.name,
			NodeName: e.node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv.Name},
		},
	}
	e.create(func() error {
		_, err := e.cs.StorageV1().VolumeAttachments().Create(e.ctx, va, metav1.CreateOptions{})
		return err
	})
	e.t.Cleanup(func() {
		ctx := context.Background()
		_ = e.cs.StorageV1().VolumeAttachments().Delete(ctx, name, metav1.DeleteOptions{})
		if v, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{}); err == nil && len(v.Finalizers) > 0 {
			v.Finalizers = nil
			_, _ = e.cs.StorageV1().VolumeAttachments().Update(ctx, v, metav1.UpdateOptions{})
		}
	})
	return va
}

// waitVA polls the VolumeAttachment until cond holds; gone means NotFound is the goal.
func (e *env) waitVA(name, what string, cond func(*storagev1.VolumeAttachment) bool) *storagev1.VolumeAttachment {
	e.t.Helper()
	var last *storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		va, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return cond(nil), nil
		}
		last = va
		return cond(va), nil
	})
	if err != nil {
		e.t.Fatalf("VolumeAttachment %s never %s; last seen: %+v", name, what, last)
	}
	return last
}

func (e *env) waitPV(name, what string, cond func(*corev1.PersistentVolume) bool) {
	e.t.Helper()
	var last *corev1.PersistentVolume
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pv
		return cond(pv), nil
	})
	if err != nil {
		e.t.Fatalf("PV %s never %s; last seen: %+v", name, what, last)
	}
}

// calls returns the driver's RPCs on volumeID, in order.
func (e *env) calls(volumeID string) []string {
	e.t.Helper()
	return framework.DriverCalls(e.t, e.callLog, func(r driver.CallRecord) bool {
		return r.VolumeID == volumeID && strings.HasPrefix(r.Method, "Controller")
	})
}

// count returns how often the driver was called with method, on any volume.
func (e *env) count(method string) int {
	e.t.Helper()
	recs, err := driver.ReadCallLog(e.callLog)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Method == method {
			n++
		}
	}
	return n
}

func (e *env) create(f func() error) {
	e.t.Helper()
	if err := f(); err != nil {
		e.t.Fatal(err)
	}
}

func sha256sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func (e *env) finalizer() string { return attacher.Finalizer(e.name) }

func hasFinalizer(fs []string, f string) bool { return slices.Contains(fs, f) }

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
}
