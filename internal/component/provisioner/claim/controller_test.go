package claim

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/component/provisioner/intent"
	"github.com/kubevol/kubevol/internal/component/provisioner/metrics"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

const driverName = "fake.csi.kubevol.io"

type fixture struct {
	t        *testing.T
	ctx      context.Context
	cs       *fake.Clientset
	drv      *csitest.Driver
	conn     *csiclient.Conn
	caps     *csiclient.Capabilities
	journal  *intent.Journal
	recorder *record.FakeRecorder
	ctl      *Controller
	// driver is the driver's name.
	driver string
	// kill stops the running controller and its journal, as SIGKILL would: nothing is
	// flushed on the way out.
	kill func()
}

// journalNamespace holds the fixture's journal.
const journalNamespace = "kubevol"

// newFixture runs a claim controller against a fake API server and an in-memory driver,
// for the tests that need its informers and workers running.
func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	return newFixturePrepared(t, nil, objs...)
}

// newFixturePrepared is newFixture with prepare run on the fake clientset before the
// controller starts: reactors are added there, since the fake's reactor chain is not safe
// to change while informers and workers call it.
func newFixturePrepared(t *testing.T, prepare func(*fake.Clientset), objs ...runtime.Object) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, cs: fake.NewClientset(objs...), recorder: record.NewFakeRecorder(100), driver: driverName}
	honourFinalizers(f.cs)
	if prepare != nil {
		prepare(f.cs)
	}
	f.drv = csitest.Start(t, &csitest.Driver{Name: driverName})
	conn, err := csiclient.Dial(csiclient.Config{Address: f.drv.Address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn = conn
	if f.caps, err = conn.Capabilities(ctx); err != nil {
		t.Fatal(err)
	}
	f.start()
	_, err = f.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: driverName}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// start runs a controller with a journal loaded from the API, as a provisioner does when
// it starts to lead.
func (f *fixture) start() {
	t := f.t
	ctx, cancel := context.WithCancel(f.ctx)
	f.journal = intent.New(f.cs, journalNamespace, f.driver, "")
	records, err := f.journal.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(f.cs, 0)
	f.ctl, err = New(Config{
		ControllerConfig: sidecar.ControllerConfig{Client: f.cs, CSI: f.conn, DriverName: f.driver,
			RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: 100 * time.Millisecond},
		Recorder: f.recorder, Caps: f.caps, Identity: "test",
		Journal: f.journal, Metrics: metrics.New(nil, nil),
		Claims: factory.Core().V1().PersistentVolumeClaims(), Volumes: factory.Core().V1().PersistentVolumes(),
		Classes: factory.Storage().V1().StorageClasses(), Options: Options{VolumeNamePrefix: "pvc", VolumeNameUUIDLength: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.journal.Run(ctx) }()
	go func() { defer wg.Done(); f.ctl.Run(ctx, 4) }()
	for _, r := range records {
		f.ctl.Enqueue(r.ClaimUID)
	}
	f.kill = sync.OnceFunc(func() { cancel(); wg.Wait(); factory.Shutdown() })
	t.Cleanup(f.kill)
}

func (f *fixture) pvs() []corev1.PersistentVolume {
	list, err := f.cs.CoreV1().PersistentVolumes().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) claim(name string) *corev1.PersistentVolumeClaim {
	out, err := f.cs.CoreV1().PersistentVolumeClaims("ns").Create(f.ctx, newClaim(name, f.driver, resource.MustParse("1Gi")), metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		f.t.Fatalf("timed out waiting for %s", what)
	}
}

// One sync provisions a claim: CreateVolume, the PV, an empty journal and the two events.
func TestProvisionsAndRecordsEvents(t *testing.T) {
	f := newSyncFixture(t)
	pvc := f.claim("data")
	if err := f.sync(pvc); err != nil {
		t.Fatal(err)
	}
	if got := f.volumeActions(); !slices.Equal(got, []string{"create persistentvolumes"}) {
		t.Errorf("actions on claims and PVs %q, want only the PV's create", got)
	}
	pv, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI.VolumeHandle != "id-pvc-uid-data" || pv.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("PV %+v", pv.Spec)
	}
	if n := f.journal.Len(); n != 0 {
		t.Errorf("journal holds %d records after the PV was saved, want none", n)
	}
	f.ExpectEvents("Normal Provisioning", "Normal ProvisioningSucceeded")
}

// The claim disappears while CreateVolume runs: the volume is deleted, no PV is made. An
// informer-level test on purpose: the claim's delete reaches the cache while a worker is
// inside the sync, which only running informers and workers do.
func TestClaimDeletedDuringCreateVolume(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	f.drv.Hook("CreateVolume", func(any) error { <-release; return nil })
	pvc := f.claim("short")
	f.waitFor("CreateVolume", func() bool { return f.drv.Calls("CreateVolume") > 0 })
	if err := f.cs.CoreV1().PersistentVolumeClaims("ns").Delete(f.ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The claim goes at once; the journal still names its volume.
	f.waitFor("the informer to see the claim deleted", func() bool { return f.ctl.claimByUID(pvc.UID) == nil })
	if _, ok := f.journal.Get(pvc.UID); !ok {
		t.Fatal("the record of the deleted claim is gone while its CreateVolume runs")
	}
	f.drv.Hook("CreateVolume", nil)
	close(release)
	f.waitFor("DeleteVolume", func() bool { return f.drv.Calls("DeleteVolume") > 0 && len(f.drv.Volumes()) == 0 })
	if _, err := f.cs.CoreV1().PersistentVolumes().Get(f.ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err == nil {
		t.Fatal("a PV was made for a deleted claim")
	}
	f.waitFor("an empty journal", func() bool { return f.journal.Len() == 0 })
	f.waitFor("the claim to be gone", func() bool {
		_, err := f.cs.CoreV1().PersistentVolumeClaims("ns").Get(f.ctx, pvc.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// A record left on a claim by an earlier release, the claim deleted meanwhile, is moved
// into the journal: the recorded CreateVolume is repeated to learn the volume ID, the
// volume is deleted, and the old finalizer no longer holds the claim. An informer-level test
// on purpose: the claim's add handler finds the record, and the syncs it leads to run until
// the claim is gone.
func TestMovesLegacyRecordFromClaim(t *testing.T) {
	now := metav1.Now()
	class := "sc"
	gone := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "ns", UID: "uid-gone", DeletionTimestamp: &now,
			Finalizers: []string{intent.LegacyFinalizer(driverName)},
			Annotations: map[string]string{pvspec.AnnStorageProvisioner: driverName,
				intent.LegacyAnnotation: `{"driver":"` + driverName + `","pv":"pvc-uid-gone","request":"` + base64.StdEncoding.EncodeToString(mustRequest(t, "pvc-uid-gone")) + `"}`}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	f := newFixture(t, gone)
	f.waitFor("the orphan to be deleted", func() bool { return f.drv.Calls("DeleteVolume") > 0 && len(f.drv.Volumes()) == 0 })
	f.waitFor("the claim to go", func() bool {
		_, err := f.cs.CoreV1().PersistentVolumeClaims("ns").Get(f.ctx, "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if n := f.drv.Calls("CreateVolume"); n != 1 {
		t.Errorf("CreateVolume calls = %d, want 1 (the lookup by name)", n)
	}
}

// A copy of a record that the journal no longer holds (this process dropped it after
// deleting the volume) leads to no CreateVolume: repeating it would create the volume
// again for nobody, and a crash before the DeleteVolume that follows would leak it.
func TestCleanupOfRemovedRecordCreatesNothing(t *testing.T) {
	f := newSyncFixture(t)
	done := newClaim("done", driverName, resource.MustParse("1Gi"))
	done.Spec.VolumeName = "elsewhere"
	f.Add(done)
	stale := intent.Record{ClaimUID: "uid-done", Namespace: "ns", Claim: "done",
		PVName: "pvc-uid-done", Request: mustRequest(t, "pvc-uid-done")}
	if err := f.ctl.cleanup(f.Ctx, stale); err != nil {
		t.Fatal(err)
	}
	if n := f.drv.Calls("CreateVolume"); n != 0 || len(f.drv.Volumes()) != 0 {
		t.Errorf("%d CreateVolume calls, %d volumes: a removed record made a volume", n, len(f.drv.Volumes()))
	}
}

// external-provisioner's role grants update on claims, create, patch and delete on PVs,
// and Leases in its namespace: a provision and its record use nothing else, and the record
// costs no claim write.
func TestProvisionUsesUpstreamVerbs(t *testing.T) {
	f := newSyncFixture(t)
	pvc := f.claim("verbs")
	if err := f.sync(pvc); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// The record is written before CreateVolume returns to the sync; its removal may still
	// be on its way, and is a Lease update too.
	var leaseWrites int
	for _, a := range f.Client.Actions() {
		verb, res := a.GetVerb(), a.GetResource().Resource
		switch {
		case verb == "get" || verb == "list" || verb == "watch":
		case res == "leases" && (verb == "create" || verb == "update") && a.GetNamespace() == journalNamespace:
			leaseWrites++
		case res == "persistentvolumes" && (verb == "create" || verb == "patch" || verb == "delete"):
		case res == "storageclasses" && verb == "create": // the fixture's
		case res == "persistentvolumeclaims" && verb == "create": // the test's
		default:
			t.Errorf("%s %s/%s in %q: not granted by external-provisioner's role, or a claim write", verb, res, a.GetSubresource(), a.GetNamespace())
		}
	}
	if leaseWrites < 1 {
		t.Errorf("%d journal writes, want the record written before CreateVolume", leaseWrites)
	}
}

// Where the role grants no writes on Leases, the provisioner goes on as upstream does, says
// so once with a Warning event on the claim, and still provisions: three syncs of one
// claim, the first two failing in CreateVolume, give one ProvisioningUnrecorded event.
func TestRefusedRecordDegrades(t *testing.T) {
	f := newSyncFixtureWith(t, syncOptions{prepare: func(cs *fake.Clientset) {
		for _, verb := range []string{"create", "update"} {
			cs.PrependReactor(verb, "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(corev1.Resource("leases"), "x", errors.New("RBAC: not allowed"))
			})
		}
	}})
	f.drv.Hook("CreateVolume", func(any) error {
		if f.drv.Calls("CreateVolume") < 3 {
			return status.Error(codes.Unavailable, "busy")
		}
		return nil
	})
	pvc := f.claim("norecord")
	var unrecorded int
	for try := 1; try <= 3; try++ {
		err := f.sync(pvc)
		if (err == nil) != (try == 3) {
			t.Fatalf("sync %d: %v; want the first two to fail in CreateVolume and the third to succeed", try, err)
		}
		for _, e := range f.Events() {
			if strings.HasPrefix(e, "Warning "+ReasonProvisioningUnrecorded) {
				unrecorded++
				if !strings.Contains(e, "create and update on leases") {
					t.Errorf("event does not say what is missing: %s", e)
				}
			}
		}
	}
	if _, err := f.Client.CoreV1().PersistentVolumes().Get(f.Ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err != nil {
		t.Fatalf("no PV without a record: %v", err)
	}
	if unrecorded != 1 {
		t.Errorf("%d ProvisioningUnrecorded events, want exactly one for the claim", unrecorded)
	}
}

// honourFinalizers makes the fake delete claims as the API server does: a claim with
// finalizers only gets a deletionTimestamp, and goes once an update removes the last one.
func honourFinalizers(cs *fake.Clientset) {
	gvr := corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	cs.PrependReactor("delete", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		obj, err := cs.Tracker().Get(gvr, d.GetNamespace(), d.GetName())
		if err != nil {
			return false, nil, nil
		}
		pvc := obj.(*corev1.PersistentVolumeClaim)
		if len(pvc.Finalizers) == 0 {
			return false, nil, nil
		}
		if pvc.DeletionTimestamp == nil {
			now := metav1.Now()
			pvc.DeletionTimestamp = &now
			return true, nil, cs.Tracker().Update(gvr, pvc, pvc.Namespace)
		}
		return true, nil, nil
	})
	cs.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pvc := a.(k8stesting.UpdateAction).GetObject().(*corev1.PersistentVolumeClaim)
		if pvc.DeletionTimestamp == nil || len(pvc.Finalizers) > 0 {
			return false, nil, nil
		}
		return true, pvc, cs.Tracker().Delete(gvr, pvc.Namespace, pvc.Name)
	})
}

// A claim whose size CSI cannot carry gets a ProvisioningFailed event that names the limit,
// and the driver is never asked; a fractional size is rounded up, as Quantity.Value does.
func TestClaimSizeBeyondCSI(t *testing.T) {
	f := newSyncFixture(t)
	var asked []int64
	f.drv.Hook("CreateVolume", func(req any) error {
		asked = append(asked, req.(*csi.CreateVolumeRequest).GetCapacityRange().GetRequiredBytes())
		return nil
	})
	for i, size := range []string{"8Ei", "1e30", "9223372036854775808", "123456789012345678901234567890", "1e10000000"} {
		pvc := f.sizedClaim(fmt.Sprintf("huge%d", i), resource.MustParse(size))
		if err := f.sync(pvc); err == nil {
			t.Errorf("%s: the sync of a claim beyond CSI's limit succeeded", size)
		}
		var failed bool
		for _, e := range f.Events() {
			if strings.HasPrefix(e, "Warning ProvisioningFailed") {
				failed = true
				if !strings.Contains(e, "the largest size a CSI volume can have (9223372036854775807 bytes)") {
					t.Errorf("%s: event does not name the limit: %s", size, e)
				}
			}
		}
		if !failed {
			t.Errorf("%s: no ProvisioningFailed event", size)
		}
	}
	pvc := f.sizedClaim("fraction", resource.MustParse("1.5"))
	if err := f.sync(pvc); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != 2 {
		t.Fatalf("CreateVolume asked for %v bytes; want only the fractional claim's, rounded up to 2", asked)
	}
	pvs, _ := f.Client.CoreV1().PersistentVolumes().List(f.Ctx, metav1.ListOptions{})
	if len(pvs.Items) != 1 || pvs.Items[0].Name != "pvc-uid-fraction" {
		t.Fatalf("%d PVs, want only the fractional claim's", len(pvs.Items))
	}
}

// A PV create the API server refuses is one default-level line and a Warning event on the
// claim naming the write, on every retry the queue's backoff allows (the sync fails); the
// volume stays in the journal for the retry.
func TestRefusedPVCreateWarns(t *testing.T) {
	f := newSyncFixture(t)
	f.Client.PrependReactor("create", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("persistentvolumes"), "", errors.New("RBAC: create not allowed"))
	})
	pvc := f.claim("refused")
	for try := 1; try <= 2; try++ {
		if err := f.sync(pvc); err == nil {
			t.Fatalf("sync %d with a refused PV create succeeded", try)
		}
		var warned bool
		for _, e := range f.Events() {
			if !strings.HasPrefix(e, "Warning "+controller.ReasonWriteFailed) {
				continue
			}
			warned = true
			if !strings.Contains(e, "cannot create persistentvolumes") || !strings.Contains(e, "forbidden") {
				t.Errorf("event %q, want one naming the refused create and the cause", e)
			}
		}
		if !warned {
			t.Errorf("sync %d: no WriteFailed event on the claim", try)
		}
		if f.journal.Len() != 1 {
			t.Errorf("journal holds %d records, want the created volume's", f.journal.Len())
		}
	}
}

// A CreateVolume refused as infeasible is retried after --retry-interval-max, not at once:
// the sync fails, so its worker puts the claim back with backoff, and its record writes go
// to the journal's Lease and never to the claim, so no informer event brings the claim
// back to the queue sooner. They once did, and one bad claim made some fifteen CreateVolume
// calls in 200 ms.
func TestInfeasibleClaimWaitsForTheRetryInterval(t *testing.T) {
	f := newSyncFixture(t)
	f.drv.Hook("CreateVolume", func(any) error { return status.Error(codes.InvalidArgument, "bad parameter") })
	pvc := f.claim("bad")
	if err := f.sync(pvc); err == nil {
		t.Fatal("the sync of an infeasible claim succeeded")
	}
	if n := f.drv.Calls("CreateVolume"); n != 1 {
		t.Fatalf("%d CreateVolume calls in one sync, want 1", n)
	}
	if got := f.volumeActions(); len(got) != 0 {
		t.Errorf("actions on claims and PVs %q, want none: a claim write would requeue the claim", got)
	}
	if n := f.ctl.queue.Len(); n != 0 {
		t.Errorf("%d keys queued by the sync itself, want none", n)
	}
}
