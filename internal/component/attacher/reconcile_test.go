package attacher

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/testing/csitest"
	"github.com/kubevol/kubevol/internal/testing/kubefake"
)

const (
	testDriver = "fake.csi.kubevol.io"
	testNode   = "node-1"
	testNodeID = "csi-node-1"
)

var (
	capPublish        = csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME
	capList           = csi.ControllerServiceCapability_RPC_LIST_VOLUMES
	capPublishedNodes = csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES
)

// publishDriver adds ControllerPublish, ControllerUnpublish and a paginated ListVolumes
// with published nodes to csitest.Driver, which has none of them: the embedded driver
// answers identity and ControllerGetCapabilities, this type the rest. Its volumes are fixed
// at creation.
type publishDriver struct {
	*csitest.Driver

	mu        sync.Mutex
	volumes   []string                   // sorted
	published map[string]map[string]bool // volume ID → node IDs
	publishes map[string]int             // ControllerPublishVolume calls by volume ID
	lists     []*csi.ListVolumesRequest
	// lostReply makes the next ControllerPublishVolume of a volume publish it and then
	// fail, as a call whose reply never reached the attacher.
	lostReply map[string]bool
	// failPublishes is how many ControllerPublishVolume calls fail before any succeeds.
	failPublishes int
	// stuckToken, if set, is the next_token of every ListVolumes page.
	stuckToken string
	// failUnpublishes is how many ControllerUnpublishVolume calls fail (FailedPrecondition)
	// before any succeeds.
	failUnpublishes int
	// holdPublish and holdUnpublish, when set before the controller starts, keep every
	// call of their kind waiting until they are closed, as a slow backend does; the calls
	// waiting and done are counted.
	holdPublish, holdUnpublish chan struct{}
	calls                      callCounts
}

// callCounts counts the held calls: those waiting on their hold and those returned.
type callCounts struct {
	mu                                                   sync.Mutex
	publishing, publishDone, unpublishing, unpublishDone int
	// events is the order of the calls' starts and ends, "publish <vol>", "published
	// <vol>", "unpublish <vol>".
	events []string
}

func (c *callCounts) add(f func(*callCounts)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *callCounts) get() callCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return callCounts{publishing: c.publishing, publishDone: c.publishDone, unpublishing: c.unpublishing, unpublishDone: c.unpublishDone,
		events: slices.Clone(c.events)}
}

// held blocks on hold, if any, or until ctx ends.
func held(ctx context.Context, hold chan struct{}) error {
	if hold == nil {
		return nil
	}
	select {
	case <-hold:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func newPublishDriver(caps []csi.ControllerServiceCapability_RPC_Type, volumes ...string) *publishDriver {
	return &publishDriver{
		Driver:    &csitest.Driver{Name: testDriver, ControllerCaps: caps},
		volumes:   slices.Sorted(slices.Values(volumes)),
		published: map[string]map[string]bool{},
		publishes: map[string]int{},
		lostReply: map[string]bool{},
	}
}

func (d *publishDriver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	d.calls.add(func(c *callCounts) { c.publishing++; c.events = append(c.events, "publish "+req.GetVolumeId()) })
	defer d.calls.add(func(c *callCounts) {
		c.publishing--
		c.publishDone++
		c.events = append(c.events, "published "+req.GetVolumeId())
	})
	if err := held(ctx, d.holdPublish); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := req.GetVolumeId()
	if !slices.Contains(d.volumes, id) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	}
	d.publishes[id]++
	if d.failPublishes > 0 {
		d.failPublishes--
		return nil, status.Error(codes.Unavailable, "backend busy")
	}
	if d.published[id] == nil {
		d.published[id] = map[string]bool{}
	}
	d.published[id][req.GetNodeId()] = true
	if d.lostReply[id] {
		delete(d.lostReply, id)
		return nil, status.Error(codes.DeadlineExceeded, "reply lost")
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"node": req.GetNodeId()}}, nil
}

func (d *publishDriver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	d.calls.add(func(c *callCounts) { c.unpublishing++; c.events = append(c.events, "unpublish "+req.GetVolumeId()) })
	defer d.calls.add(func(c *callCounts) { c.unpublishing--; c.unpublishDone++ })
	if err := held(ctx, d.holdUnpublish); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.failUnpublishes > 0 {
		d.failUnpublishes--
		d.mu.Unlock()
		return nil, status.Error(codes.FailedPrecondition, "volume still in use on the backend")
	}
	d.mu.Unlock()
	d.unpublish(req.GetVolumeId(), req.GetNodeId())
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *publishDriver) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists = append(d.lists, req)
	start := 0
	if tok := req.GetStartingToken(); tok != "" && tok != d.stuckToken {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(d.volumes) {
			return nil, status.Errorf(codes.Aborted, "invalid starting_token %q", tok)
		}
		start = n
	}
	end := len(d.volumes)
	rsp := &csi.ListVolumesResponse{}
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
		rsp.NextToken = strconv.Itoa(end)
	}
	if d.stuckToken != "" {
		rsp.NextToken = d.stuckToken
	}
	for _, id := range d.volumes[start:end] {
		var nodes []string
		for n := range d.published[id] {
			nodes = append(nodes, n)
		}
		rsp.Entries = append(rsp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: id},
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes},
		})
	}
	return rsp, nil
}

// unpublish detaches a volume behind the attacher's back, as a storage backend that lost
// an attachment does.
func (d *publishDriver) unpublish(volume, node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.published[volume], node)
}

func (d *publishDriver) failNextPublishes(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failPublishes = n
}

func (d *publishDriver) failNextUnpublishes(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failUnpublishes = n
}

func (d *publishDriver) publishCount(volume string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.publishes[volume]
}

func (d *publishDriver) isPublished(volume, node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.published[volume][node]
}

func (d *publishDriver) listRequests() []*csi.ListVolumesRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.lists)
}

type testEnv struct {
	t   *testing.T
	ctx context.Context
	cs  *fake.Clientset
	drv *publishDriver
	c   *Controller
	// stop stops the controller and returns once Run has.
	stop func()
}

// startController runs a Controller against drv and a fake clientset holding the CSINode
// of testNode, a PV per volume of drv and objs.
func startController(t *testing.T, drv *publishDriver, cfg Config, objs ...runtime.Object) *testEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	timeout := 5 * time.Second
	if drv.holdPublish != nil || drv.holdUnpublish != nil {
		timeout = time.Minute // held calls end when the test releases them, not at --timeout
	}
	conn, err := csiclient.Dial(csiclient.Config{Address: csitest.StartAs(t, drv.Driver, drv).Address, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, ctx: ctx, cs: fake.NewClientset(append(testObjects(drv), objs...)...), drv: drv}
	kubefake.WithResourceVersions(e.cs)
	cfg.Client, cfg.CSI, cfg.DriverName, cfg.Workers = e.cs, conn, testDriver, 2
	if cfg.RetryIntervalStart == 0 {
		cfg.RetryIntervalStart, cfg.RetryIntervalMax = 10*time.Millisecond, 100*time.Millisecond
	}
	if e.c, err = New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.c.Run(ctx) }()
	e.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(func() { e.stop(); conn.Close() })
	return e
}

// attachment returns the VolumeAttachment of volume on testNode, as the attach/detach
// controller creates it.
func attachment(volume string) *storagev1.VolumeAttachment {
	pv := "pv-" + volume
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-" + volume},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: testNode,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
}

func (e *testEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		e.t.Fatalf("%s never happened", what)
	}
}

func (e *testEnv) attached(volume string) bool {
	va, err := e.cs.StorageV1().VolumeAttachments().Get(e.ctx, "va-"+volume, metav1.GetOptions{})
	return err == nil && va.Status.Attached
}

// settled waits until the controller's own cache shows the volumes attached: from then on
// no sync of theirs publishes again unless the reconcile asks for it.
func (e *testEnv) settled(volumes ...string) {
	e.t.Helper()
	for _, v := range volumes {
		e.waitFor(v+" attached in the controller's cache", func() bool {
			va, err := e.c.vaLister.Get("va-" + v)
			return err == nil && va.Status.Attached
		})
	}
}

// listPasses counts the reconcile passes, which each begin with an unpaged request.
func (e *testEnv) listPasses() int {
	n := 0
	for _, r := range e.drv.listRequests() {
		if r.GetStartingToken() == "" {
			n++
		}
	}
	return n
}

func (e *testEnv) events(reason string) []string {
	e.t.Helper()
	evs, err := e.cs.CoreV1().Events("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Items {
		if ev.Reason == reason {
			out = append(out, ev.InvolvedObject.Name+": "+ev.Message)
		}
	}
	return out
}

var allCaps = []csi.ControllerServiceCapability_RPC_Type{capPublish, capList, capPublishedNodes}

// An attached VolumeAttachment whose volume the driver stops reporting on its node is
// published again, without status.attached ever turning false; the attachments the
// driver still reports are left alone, and every pass pages through all volumes. An
// informer-level test on purpose: it checks the periodic passes of the running controller
// and the syncs they queue, across passes, as --reconcile-sync runs them.
func TestReconcileRepublishesLostAttachment(t *testing.T) {
	vols := []string{"vol-a", "vol-b", "vol-c"}
	drv := newPublishDriver(allCaps, vols...)
	e := startController(t, drv, Config{ReconcileSync: 10 * time.Millisecond, MaxEntries: 2},
		attachment("vol-a"), attachment("vol-b"), attachment("vol-c"))
	e.settled(vols...)
	before := map[string]int{}
	for _, v := range vols {
		before[v] = drv.publishCount(v)
	}

	drv.unpublish("vol-b", testNodeID)
	e.waitFor("vol-b published again", func() bool { return drv.isPublished("vol-b", testNodeID) })
	// More passes, each of which would republish a volume it misjudged.
	passes := e.listPasses()
	e.waitFor("three more reconcile passes", func() bool { return e.listPasses() >= passes+3 })
	for _, v := range []string{"vol-a", "vol-c"} {
		if got := drv.publishCount(v); got != before[v] {
			t.Errorf("%s is still published but got %d ControllerPublishVolume calls, want %d", v, got, before[v])
		}
	}
	if got := drv.publishCount("vol-b"); got <= before["vol-b"] {
		t.Errorf("vol-b: %d ControllerPublishVolume calls, want more than the %d before the loss", got, before["vol-b"])
	}
	if !e.attached("vol-b") {
		t.Error("va-vol-b is not attached after the republish")
	}

	// Pagination: max_entries on every page, and the second page asked for.
	var paged bool
	for _, r := range drv.listRequests() {
		if r.GetMaxEntries() != 2 {
			t.Fatalf("ListVolumes max_entries = %d, want 2 (--max-entries)", r.GetMaxEntries())
		}
		paged = paged || r.GetStartingToken() != ""
	}
	if !paged {
		t.Error("no ListVolumes call asked for a second page")
	}
	e.waitFor("a NotPublished event", func() bool { return len(e.events(reasonNotPublished)) > 0 })
	for _, ev := range e.events(reasonNotPublished) {
		if !strings.HasPrefix(ev, "va-vol-b: ") || !strings.Contains(ev, testNodeID) {
			t.Errorf("NotPublished event %q, want one on va-vol-b naming node %s", ev, testNodeID)
		}
	}
}

// The mirror case, as upstream: an unattached VolumeAttachment whose volume the driver
// reports published is synced again at once rather than after its backoff. Here the
// publish succeeded but its reply was lost, and the backoff is far longer than the test.
// An informer-level test on purpose: what is checked is the queue, that the pass's requeue
// overtakes the key's backoff.
func TestReconcileRequeuesPublishedButUnattached(t *testing.T) {
	drv := newPublishDriver(allCaps, "vol-a")
	drv.lostReply["vol-a"] = true
	e := startController(t, drv, Config{ControllerConfig: sidecar.ControllerConfig{RetryIntervalStart: time.Hour, RetryIntervalMax: time.Hour}, ReconcileSync: 10 * time.Millisecond},
		attachment("vol-a"))
	e.waitFor("va-vol-a attached despite an hour of backoff", func() bool { return e.attached("vol-a") })
	if got := drv.publishCount("vol-a"); got < 2 {
		t.Errorf("%d ControllerPublishVolume calls, want the lost one and the reconcile's", got)
	}
	if evs := e.events(reasonNotPublished); len(evs) != 0 {
		t.Errorf("NotPublished events for a volume that is published: %q", evs)
	}
}

// A republish that fails is retried with backoff until it succeeds: upstream drops its
// force flag with the first failure and waits for the next pass. Each sync of the retry
// publishes again, and status.attached stays true throughout.
func TestReconcileRetriesFailedRepublish(t *testing.T) {
	drv := newPublishDriver(allCaps, "vol-a")
	e := newSyncEnv(t, drv, Config{}, attachment("vol-a"))
	if err := e.attach("va-vol-a"); err != nil {
		t.Fatal(err)
	}
	before := drv.publishCount("vol-a")

	drv.unpublish("vol-a", testNodeID)
	drv.failNextPublishes(2)
	e.Feed()
	if err := e.c.reconcile(e.Ctx); err != nil {
		t.Fatal(err)
	}
	for try := 1; try <= 2; try++ {
		if err := e.attach("va-vol-a"); err == nil {
			t.Fatalf("republish %d succeeded, want the driver's failure", try)
		}
		if !e.va("va-vol-a").Status.Attached {
			t.Fatal("va-vol-a lost status.attached while being republished")
		}
	}
	if err := e.attach("va-vol-a"); err != nil {
		t.Fatal(err)
	}
	if !drv.isPublished("vol-a", testNodeID) {
		t.Fatal("vol-a not published again")
	}
	if got := drv.publishCount("vol-a"); got != before+3 {
		t.Errorf("%d ControllerPublishVolume calls after the loss, want 3 (two failures, one success)", got-before)
	}
	va := e.va("va-vol-a")
	if va.Status.AttachError != nil || !va.Status.Attached {
		t.Errorf("status after the republish: %+v, want attached without attachError", va.Status)
	}
	// Republished: the next sync does not publish again.
	if err := e.attach("va-vol-a"); err != nil || drv.publishCount("vol-a") != before+3 {
		t.Errorf("a sync after the republish: %v, %d calls", err, drv.publishCount("vol-a")-before)
	}
}

// Only a driver with ControllerPublish, LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES is
// reconciled, as upstream; the others never get a ListVolumes call. An informer-level test
// on purpose: what is checked is whether the running controller has a periodic pass.
func TestReconcileNeedsCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps []csi.ControllerServiceCapability_RPC_Type
		want bool
	}{
		{"all", allCaps, true},
		{"no published nodes", []csi.ControllerServiceCapability_RPC_Type{capPublish, capList}, false},
		{"no list", []csi.ControllerServiceCapability_RPC_Type{capPublish, capPublishedNodes}, false},
		{"no publish", []csi.ControllerServiceCapability_RPC_Type{capList, capPublishedNodes}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drv := newPublishDriver(tc.caps, "vol-a")
			e := startController(t, drv, Config{ReconcileSync: 5 * time.Millisecond}, attachment("vol-a"))
			if e.c.reconciles != tc.want {
				t.Fatalf("reconciles = %v, want %v", e.c.reconciles, tc.want)
			}
			e.settled("vol-a")
			if tc.want {
				e.waitFor("a ListVolumes call", func() bool { return e.listPasses() > 0 })
				return
			}
			// A registered pass runs right away, before and while the attachment settles
			// (the case above); stopping the controller ends every pass it could have had.
			e.stop()
			if n := len(drv.listRequests()); n != 0 {
				t.Errorf("driver without the capabilities got %d ListVolumes calls", n)
			}
		})
	}
}

// A driver that answers a page with the token it was given would loop the pass forever.
func TestPublishedNodesStopsOnRepeatedToken(t *testing.T) {
	drv := newPublishDriver(allCaps, "vol-a", "vol-b")
	drv.stuckToken = "again"
	e := newSyncEnv(t, drv, Config{MaxEntries: 1})
	_, err := e.c.publishedNodes(e.Ctx)
	if err == nil || !strings.Contains(err.Error(), "next_token") {
		t.Fatalf("publishedNodes = %v, want an error about the repeated next_token", err)
	}
	if n := len(drv.listRequests()); n != 2 {
		t.Errorf("%d ListVolumes calls, want 2: the first page and the one that repeated its token", n)
	}
}
