package claim

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/internal/component/provisioner/intent"
	"github.com/kubevol/kubevol/internal/component/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller/controllertest"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

// syncFixture is a claim controller on a controllertest fixture, with the class "sc" of
// the driver: nothing but the journal runs, the test calls the syncs one claim at a time.
type syncFixture struct {
	*controllertest.Fixture
	drv     *csitest.Driver
	journal *intent.Journal
	ctl     *Controller
	driver  string
}

// syncOptions change a syncFixture: the driver's name, the class "sc"'s provisioner and
// parameters, and reactors added before the journal starts (the fake's reactor chain is
// not safe to change while the journal's goroutine calls it).
type syncOptions struct {
	driver, provisioner string
	params              map[string]string
	prepare             func(*fake.Clientset)
}

func newSyncFixture(t *testing.T) *syncFixture {
	return newSyncFixtureWith(t, syncOptions{})
}

func newSyncFixtureWith(t *testing.T, o syncOptions) *syncFixture {
	t.Helper()
	if o.driver == "" {
		o.driver = driverName
	}
	if o.provisioner == "" {
		o.provisioner = o.driver
	}
	f := &syncFixture{driver: o.driver, Fixture: controllertest.New(t,
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: o.provisioner, Parameters: o.params})}
	if o.prepare != nil {
		o.prepare(f.Client)
	}
	f.drv = csitest.Start(t, &csitest.Driver{Name: o.driver})
	conn, err := csiclient.Dial(csiclient.Config{Address: f.drv.Address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	caps, err := conn.Capabilities(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.journal = intent.New(f.Client, journalNamespace, o.driver, "")
	if _, err := f.journal.Load(f.Ctx); err != nil {
		t.Fatal(err)
	}
	// The journal writes its records on its own goroutine, as it does in the provisioner.
	ctx, cancel := context.WithCancel(f.Ctx)
	var wg sync.WaitGroup
	wg.Go(func() { f.journal.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	f.ctl, err = New(Config{
		ControllerConfig: sidecar.ControllerConfig{Client: f.Client, CSI: conn, DriverName: o.driver},
		Recorder:         f.Recorder, Caps: caps, Identity: "test",
		Journal: f.journal, Metrics: metrics.New(nil, nil),
		Claims: f.Informers.Core().V1().PersistentVolumeClaims(), Volumes: f.Informers.Core().V1().PersistentVolumes(),
		Classes: f.Informers.Storage().V1().StorageClasses(), Options: Options{VolumeNamePrefix: "pvc", VolumeNameUUIDLength: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// claim adds a 1Gi claim of class "sc" addressed to the driver.
func (f *syncFixture) claim(name string) *corev1.PersistentVolumeClaim {
	return f.sizedClaim(name, resource.MustParse("1Gi"))
}

// sizedClaim adds a claim of class "sc" addressed to the driver that requests size.
func (f *syncFixture) sizedClaim(name string, size resource.Quantity) *corev1.PersistentVolumeClaim {
	pvc := newClaim(name, f.driver, size)
	f.Add(pvc)
	return pvc
}

// newClaim is a claim "ns/name" (UID "uid-name") of class "sc", addressed to driver, that
// requests size.
func newClaim(name, driver string, size resource.Quantity) *corev1.PersistentVolumeClaim {
	class := "sc"
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: ktypes.UID("uid-" + name),
			Annotations: map[string]string{pvspec.AnnStorageProvisioner: driver}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// sync runs one sync of the claim.
func (f *syncFixture) sync(pvc *corev1.PersistentVolumeClaim) error {
	f.T.Helper()
	return controllertest.Sync(f.Fixture, f.ctl.sync, pvc.UID)
}

// volumeActions are the actions on claims and PVs since the last sync: the journal's
// Lease writes run on its own goroutine, so they are left out.
func (f *syncFixture) volumeActions() []string {
	var out []string
	for _, a := range f.Actions() {
		if strings.Contains(a, " persistentvolume") {
			out = append(out, a)
		}
	}
	return out
}
