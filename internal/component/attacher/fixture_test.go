package attacher

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevol/kubevol/internal/runtime/controller/controllertest"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

// syncEnv is a Controller on a controllertest fixture: nothing runs, the test calls the
// syncs one key at a time.
type syncEnv struct {
	*controllertest.Fixture
	drv *publishDriver
	c   *Controller
}

// newSyncEnv builds a Controller against drv and a fixture holding the CSINode of
// testNode, a PV per volume of drv and objs, as startController does, without running it.
func newSyncEnv(t *testing.T, drv *publishDriver, cfg Config, objs ...runtime.Object) *syncEnv {
	t.Helper()
	conn, err := csiclient.Dial(csiclient.Config{Address: csitest.StartAs(t, drv.Driver, drv).Address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := controllertest.New(t, append(testObjects(drv), objs...)...)
	cfg.Client, cfg.CSI, cfg.DriverName, cfg.informers = f.Client, conn, testDriver, f.Informers
	c, err := New(f.Ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's recorder instead of the broadcaster, which would write events through
	// the client on its own goroutine.
	c.stopEvents()
	c.recorder = f.Recorder
	c.vas.Recorder, c.pvs.Recorder = f.Recorder, f.Recorder
	return &syncEnv{Fixture: f, drv: drv, c: c}
}

// testObjects are the CSINode of testNode and a PV per volume of drv.
func testObjects(drv *publishDriver) []runtime.Object {
	objs := []runtime.Object{&storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: testNodeID}}},
	}}
	for _, v := range drv.volumes {
		objs = append(objs, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-" + v},
			Spec: corev1.PersistentVolumeSpec{
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: v}},
			},
		})
	}
	return objs
}

// attach and detach run one sync of the attach or detach queue; pv one of the PV queue.
func (e *syncEnv) attach(name string) error {
	e.T.Helper()
	return controllertest.Sync(e.Fixture, e.c.syncAttach, name)
}

func (e *syncEnv) detach(name string) error {
	e.T.Helper()
	return controllertest.Sync(e.Fixture, e.c.syncDetach, name)
}

func (e *syncEnv) pv(name string) error {
	e.T.Helper()
	return controllertest.Sync(e.Fixture, e.c.syncPV, name)
}

// va reads a VolumeAttachment from the store, without an action.
func (e *syncEnv) va(name string) *storagev1.VolumeAttachment {
	e.T.Helper()
	obj, err := e.Client.Tracker().Get(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "", name)
	if err != nil {
		e.T.Fatal(err)
	}
	return obj.(*storagev1.VolumeAttachment)
}

// markDeleted sets the deletionTimestamp of a VolumeAttachment, as a delete of an object
// with finalizers does.
func (e *syncEnv) markDeleted(name string) {
	e.T.Helper()
	va := e.va(name).DeepCopy()
	now := metav1.Now()
	va.DeletionTimestamp = &now
	if err := e.Client.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), va, ""); err != nil {
		e.T.Fatal(err)
	}
}
