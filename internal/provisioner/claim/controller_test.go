package claim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/csiclient"
	"github.com/kubevol/kubevol/internal/csitest"
	"github.com/kubevol/kubevol/internal/provisioner/intent"
	"github.com/kubevol/kubevol/internal/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/sidecar"
)

const driverName = "fake.csi.kubevol.io"

type fixture struct {
	t        *testing.T
	ctx      context.Context
	cs       *fake.Clientset
	drv      *csitest.Driver
	journal  *intent.Journal
	recorder *record.FakeRecorder
	ctl      *Controller
}

// newFixture runs a claim controller against a fake API server and an in-memory driver.
func newFixture(t *testing.T) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, cs: fake.NewClientset(), recorder: record.NewFakeRecorder(100)}
	f.drv = csitest.Start(t, &csitest.Driver{Name: driverName})
	conn, err := csiclient.Dial(csiclient.Config{Address: f.drv.Address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	caps, err := conn.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.journal = intent.New(f.cs, "kube-system", "journal")
	if _, err := f.journal.Load(ctx); err != nil {
		t.Fatal(err)
	}
	go f.journal.Run(ctx)
	factory := informers.NewSharedInformerFactory(f.cs, 0)
	f.ctl, err = New(Config{
		ControllerConfig: sidecar.ControllerConfig{Client: f.cs, CSI: conn, DriverName: driverName,
			RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: 100 * time.Millisecond},
		Recorder: f.recorder, Caps: caps, Identity: "test",
		Journal: f.journal, Metrics: metrics.New(nil, nil),
		Claims: factory.Core().V1().PersistentVolumeClaims(), Volumes: factory.Core().V1().PersistentVolumes(),
		Classes: factory.Storage().V1().StorageClasses(), Options: Options{VolumeNamePrefix: "pvc", VolumeNameUUIDLength: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go f.ctl.Run(ctx, 4)
	_, err = f.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: driverName}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) claim(name string) *corev1.PersistentVolumeClaim {
	return f.sizedClaim(name, resource.MustParse("1Gi"))
}

func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		f.t.Fatalf("timed out waiting for %s", what)
	}
}

func TestProvisionsAndRecordsEvents(t *testing.T) {
	f := newFixture(t)
	pvc := f.claim("data")
	var pv *corev1.PersistentVolume
	f.waitFor("the PV", func() bool {
		var err error
		pv, err = f.cs.CoreV1().PersistentVolumes().Get(f.ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{})
		return err == nil
	})
	if pv.Spec.CSI.VolumeHandle != "id-pvc-uid-data" || pv.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("PV %+v", pv.Spec)
	}
	f.waitFor("an empty journal", func() bool { return f.journal.Len() == 0 })
	events := strings.Join([]string{<-f.recorder.Events, <-f.recorder.Events}, "\n")
	if !strings.Contains(events, "Normal Provisioning") || !strings.Contains(events, "Normal ProvisioningSucceeded") {
		t.Fatalf("events:\n%s", events)
	}
}

// The claim disappears while CreateVolume runs: the volume is deleted, no PV is made.
func TestClaimDeletedDuringCreateVolume(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	f.drv.Hook("CreateVolume", func(any) error { <-release; return nil })
	pvc := f.claim("short")
	f.waitFor("CreateVolume", func() bool { return f.drv.Calls("CreateVolume") > 0 })
	if err := f.cs.CoreV1().PersistentVolumeClaims("ns").Delete(f.ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the informer to lose the claim", func() bool { return f.ctl.claimByUID(pvc.UID) == nil })
	f.drv.Hook("CreateVolume", nil)
	close(release)
	f.waitFor("DeleteVolume", func() bool { return f.drv.Calls("DeleteVolume") > 0 && len(f.drv.Volumes()) == 0 })
	if _, err := f.cs.CoreV1().PersistentVolumes().Get(f.ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err == nil {
		t.Fatal("a PV was made for a deleted claim")
	}
	f.waitFor("an empty journal", func() bool { return f.journal.Len() == 0 })
}

// A record left by a crashed run whose claim is gone is cleaned up: the recorded
// CreateVolume is repeated to learn the volume ID, then the volume is deleted.
func TestSweepsOrphanedIntentOnStart(t *testing.T) {
	f := newFixture(t)
	// The earlier run's CreateVolume reached the driver; then it crashed and the claim went.
	f.claim("gone")
	f.waitFor("the volume", func() bool { return len(f.drv.Volumes()) == 1 })
	f.waitFor("the PV", func() bool {
		pvs, _ := f.cs.CoreV1().PersistentVolumes().List(f.ctx, metav1.ListOptions{})
		return len(pvs.Items) == 1
	})
	// Simulate the crash: the PV never got saved and the claim is gone.
	if err := f.cs.CoreV1().PersistentVolumes().Delete(f.ctx, "pvc-uid-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.cs.CoreV1().PersistentVolumeClaims("ns").Delete(f.ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the informer to lose the claim", func() bool { return f.ctl.claimByUID("uid-gone") == nil })
	if err := f.journal.Add(f.ctx, intent.Record{ClaimUID: "uid-gone", Namespace: "ns", Claim: "gone", PVName: "pvc-uid-gone", Request: mustRequest(t, "pvc-uid-gone")}); err != nil {
		t.Fatal(err)
	}
	f.ctl.Enqueue("uid-gone")
	f.waitFor("the orphan to be deleted", func() bool { return len(f.drv.Volumes()) == 0 })
	f.waitFor("an empty journal", func() bool { return f.journal.Len() == 0 })
	if n := f.drv.Calls("CreateVolume"); n != 2 {
		t.Errorf("CreateVolume calls = %d, want 2 (the provision and the lookup by name)", n)
	}
}

// A claim whose size CSI cannot carry gets a ProvisioningFailed event that names the limit,
// and the driver is never asked; a fractional size is rounded up, as Quantity.Value does.
func TestClaimSizeBeyondCSI(t *testing.T) {
	f := newFixture(t)
	var asked []int64
	var mu sync.Mutex
	f.drv.Hook("CreateVolume", func(req any) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, req.(*csi.CreateVolumeRequest).GetCapacityRange().GetRequiredBytes())
		return nil
	})
	hostile := []string{"8Ei", "1e30", "9223372036854775808", "123456789012345678901234567890", "1e10000000"}
	for i, size := range hostile {
		f.sizedClaim(fmt.Sprintf("huge%d", i), resource.MustParse(size))
	}
	seen := map[string]bool{}
	for len(seen) < len(hostile) {
		select {
		case e := <-f.recorder.Events:
			if strings.HasPrefix(e, "Warning ProvisioningFailed") {
				if !strings.Contains(e, "the largest size a CSI volume can have (9223372036854775807 bytes)") {
					t.Fatalf("event does not name the limit: %s", e)
				}
				seen[e] = true
			}
		case <-f.ctx.Done():
			t.Fatalf("timed out; ProvisioningFailed events so far: %v", seen)
		}
	}
	go func() { // the refused claims keep retrying; a full recorder would block the workers
		for {
			select {
			case <-f.recorder.Events:
			case <-f.ctx.Done():
				return
			}
		}
	}()
	f.sizedClaim("fraction", resource.MustParse("1.5"))
	f.waitFor("the fractional claim's PV", func() bool {
		_, err := f.cs.CoreV1().PersistentVolumes().Get(f.ctx, "pvc-uid-fraction", metav1.GetOptions{})
		return err == nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != 2 {
		t.Fatalf("CreateVolume asked for %v bytes; want only the fractional claim's, rounded up to 2", asked)
	}
	pvs, _ := f.cs.CoreV1().PersistentVolumes().List(f.ctx, metav1.ListOptions{})
	if len(pvs.Items) != 1 {
		t.Fatalf("%d PVs, want only the fractional claim's", len(pvs.Items))
	}
}

func (f *fixture) sizedClaim(name string, size resource.Quantity) *corev1.PersistentVolumeClaim {
	class := "sc"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: ktypes.UID("uid-" + name),
			Annotations: map[string]string{pvspec.AnnStorageProvisioner: driverName}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	out, err := f.cs.CoreV1().PersistentVolumeClaims("ns").Create(f.ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}
