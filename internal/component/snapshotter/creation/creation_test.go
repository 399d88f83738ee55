package creation

import (
	"context"
	"errors"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

const reason = "SnapshotCreationFailed"

var errNotReady = errors.New("not ready")

// harness runs the protocol for VolumeSnapshotContents over a fake clientset, with a CSI
// call whose request is a string and whose answer the test sets.
type harness struct {
	t    *testing.T
	ctx  context.Context
	snap *snapfake.Clientset
	rec  *record.FakeRecorder

	reqErr, lockErr, callErr error
	ready                    bool
	lock                     bool

	calls        []string
	beingCreated []bool // at each call, whether the stored content had the annotation
	locked       []bool // at each call, whether the lock was held
	held         bool
}

func newHarness(t *testing.T, content *snapv1.VolumeSnapshotContent) *harness {
	//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
	return &harness{t: t, ctx: context.Background(), snap: snapfake.NewSimpleClientset(content), rec: record.NewFakeRecorder(100)}
}

func (h *harness) protocol() Create[*snapv1.VolumeSnapshotContent, string] {
	p := Create[*snapv1.VolumeSnapshotContent, string]{
		Writer: snapshotter.VolumeSnapshotContents(h.snap, write.Update), Recorder: h.rec, Op: "CreateSnapshot",
		BoundFinalizer: snapshotter.FinalizerContentBound, BeingCreated: snapshotter.AnnBeingCreated, Reason: reason,
		NotReady: errNotReady,
		Handle: func(c *snapv1.VolumeSnapshotContent) string {
			if c.Status == nil {
				return ""
			}
			return ptr.Deref(c.Status.SnapshotHandle, "")
		},
		Ready: func(c *snapv1.VolumeSnapshotContent) bool {
			return c.Status != nil && ptr.Deref(c.Status.ReadyToUse, false)
		},
		ErrorMessage: func(c *snapv1.VolumeSnapshotContent) *string {
			if c.Status == nil || c.Status.Error == nil {
				return nil
			}
			return c.Status.Error.Message
		},
		Request: func(_ context.Context, c *snapv1.VolumeSnapshotContent) (string, error) {
			return "snapshot-" + string(c.Spec.VolumeSnapshotRef.UID), h.reqErr
		},
		Call: func(_ context.Context, req string) (map[string]any, bool, error) {
			h.calls = append(h.calls, req)
			h.beingCreated = append(h.beingCreated, h.stored().Annotations[snapshotter.AnnBeingCreated] == "yes")
			h.locked = append(h.locked, h.held)
			if h.callErr != nil {
				return nil, false, h.callErr
			}
			return map[string]any{"snapshotHandle": "h-" + req, "readyToUse": h.ready, "error": nil}, h.ready, nil
		},
		Failure: func(req string, err error) string { return "failed to take " + req + ": " + err.Error() },
	}
	if h.lock {
		p.Lock = func(_ context.Context, req string) (func(), error) {
			if h.lockErr != nil {
				return nil, h.lockErr
			}
			h.held = true
			return func() { h.held = false }, nil
		}
	}
	return p
}

func (h *harness) run() (*snapv1.VolumeSnapshotContent, error) {
	h.t.Helper()
	return h.protocol().Run(h.ctx, h.stored())
}

func (h *harness) stored() *snapv1.VolumeSnapshotContent {
	h.t.Helper()
	return snaptest.MustGet(h.t, h.ctx, h.snap.SnapshotV1().VolumeSnapshotContents(), "c1")
}

// statusWrites counts the patches of the content's status.
func (h *harness) statusWrites() int {
	n := 0
	for _, a := range h.snap.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func content() *snapv1.VolumeSnapshotContent {
	return &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "c1", Finalizers: []string{snapshotter.FinalizerContentBound}},
		Spec: snapv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Namespace: "ns", Name: "s", UID: "uid-1"}}}
}

// A content without the bound finalizer gets no create and no write: it could vanish unseen
// with the only record of the backend snapshot.
func TestWaitsForBoundFinalizer(t *testing.T) {
	c := content()
	c.Finalizers = nil
	h := newHarness(t, c)
	if _, err := h.protocol().Run(h.ctx, c); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 0 || len(h.snap.Actions()) != 0 {
		t.Errorf("calls %v, actions %v, want none", h.calls, h.snap.Actions())
	}
}

// A request that cannot be built is the user's to fix: a warning, status.error, no call, no
// being-created annotation.
func TestRequestError(t *testing.T) {
	h := newHarness(t, content())
	h.reqErr = errors.New("no class")
	if _, err := h.run(); !errors.Is(err, h.reqErr) {
		t.Fatalf("Run = %v, want the request's error", err)
	}
	got := h.stored()
	switch {
	case len(h.calls) != 0:
		t.Error("the driver was called without a request")
	case got.Status == nil || got.Status.Error == nil || ptr.Deref(got.Status.Error.Message, "") != "no class" || ptr.Deref(got.Status.ReadyToUse, false):
		t.Errorf("status %+v, want the request's error, not ready", got.Status)
	case got.Annotations[snapshotter.AnnBeingCreated] != "":
		t.Error("being-created set although nothing was asked of the driver")
	case !snaptest.SawEvent(h.rec, "Warning "+reason+" no class"):
		t.Error("no warning")
	}
}

// A create stores being-created before the call and removes it once the handle is in the
// status; a snapshot not ready yet returns NotReady, so the create is repeated under the
// same name, this time without setting the annotation again.
func TestCreate(t *testing.T) {
	h := newHarness(t, content())
	if _, err := h.run(); err != errNotReady {
		t.Fatalf("Run of a not-ready snapshot = %v, want NotReady", err)
	}
	got := h.stored()
	switch {
	case len(h.beingCreated) != 1 || !h.beingCreated[0]:
		t.Errorf("being-created at the call: %v, want stored", h.beingCreated)
	case got.Annotations[snapshotter.AnnBeingCreated] != "":
		t.Error("being-created kept after the driver gave a handle")
	case got.Status == nil || ptr.Deref(got.Status.SnapshotHandle, "") != "h-snapshot-uid-1" || ptr.Deref(got.Status.ReadyToUse, false):
		t.Errorf("status %+v, want the handle, not ready", got.Status)
	}
	h.ready = true
	h.snap.ClearActions()
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case len(h.calls) != 2 || h.calls[1] != h.calls[0]:
		t.Errorf("calls %v, want the same request twice", h.calls)
	case h.beingCreated[1]:
		t.Error("being-created set again for a content whose handle is known")
	case !ptr.Deref(out.Status.ReadyToUse, false) || !ptr.Deref(h.stored().Status.ReadyToUse, false):
		t.Errorf("returned %+v, stored %+v: want ready", out.Status, h.stored().Status)
	}
	for _, a := range h.snap.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("the content was updated (%v) although its annotation did not change", a)
		}
	}
}

// A ready content whose being-created annotation was left behind (the sidecar killed
// between the status write and the annotation's removal) gets no second call, whose lost
// reply would record an error over the ready status: only the annotation goes.
func TestReadyContentIsNotCreatedAgain(t *testing.T) {
	c := content()
	c.Annotations = map[string]string{snapshotter.AnnBeingCreated: "yes"}
	c.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: new("h-1"), ReadyToUse: new(true)}
	h := newHarness(t, c)
	h.callErr = status.Error(codes.Unavailable, "reply lost")
	out, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	got := h.stored()
	switch {
	case len(h.calls) != 0:
		t.Errorf("calls %v for a ready content, want none", h.calls)
	case got.Annotations[snapshotter.AnnBeingCreated] != "" || out.Annotations[snapshotter.AnnBeingCreated] != "":
		t.Error("being-created kept on a ready content")
	case !ptr.Deref(got.Status.ReadyToUse, false) || got.Status.Error != nil:
		t.Errorf("status %+v, want ready without error", got.Status)
	}
}

// The lock is held around the call and only around it; a lock that fails makes no call.
func TestLock(t *testing.T) {
	h := newHarness(t, content())
	h.lock, h.ready = true, true
	if _, err := h.run(); err != nil {
		t.Fatal(err)
	}
	if len(h.locked) != 1 || !h.locked[0] || h.held {
		t.Errorf("lock at the call %v, held after %v: want held during the call only", h.locked, h.held)
	}
	h2 := newHarness(t, content())
	h2.lock, h2.lockErr = true, context.Canceled
	if _, err := h2.run(); !errors.Is(err, context.Canceled) || len(h2.calls) != 0 {
		t.Errorf("Run with a failing lock = %v, %d calls; want the lock's error, no call", err, len(h2.calls))
	}
}

// A failed call records the error (event, status.error, not ready). A final error takes
// being-created off, so the content may go; an error after which the create may still take
// effect keeps it, so the content cannot be released while a snapshot may exist. A content
// whose handle is known never had being-created set again.
func TestCallError(t *testing.T) {
	cases := []struct {
		err   error
		keeps bool
	}{
		{status.Error(codes.InvalidArgument, "bad"), false},
		{status.Error(codes.NotFound, "no volume"), false},
		{status.Error(codes.Internal, "bug"), false},
		{status.Error(codes.DeadlineExceeded, "slow"), true},
		{status.Error(codes.Unavailable, "down"), true},
		{status.Error(codes.Canceled, "cancelled"), true},
		{status.Error(codes.Aborted, "busy"), true},
		{status.Error(codes.ResourceExhausted, "full"), true},
		{errors.New("connection reset"), true},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			h := newHarness(t, content())
			h.callErr = tc.err
			if _, err := h.run(); !errors.Is(err, tc.err) {
				t.Fatalf("Run = %v, want the driver's error", err)
			}
			got := h.stored()
			want := "failed to take snapshot-uid-1: " + tc.err.Error()
			switch {
			case (got.Annotations[snapshotter.AnnBeingCreated] == "yes") != tc.keeps:
				t.Errorf("being-created kept = %v, want %v", !tc.keeps, tc.keeps)
			case got.Status == nil || got.Status.Error == nil || ptr.Deref(got.Status.Error.Message, "") != want || ptr.Deref(got.Status.ReadyToUse, false):
				t.Errorf("status %+v, want %q, not ready", got.Status, want)
			case !snaptest.SawEvent(h.rec, "Warning "+reason+" "+want):
				t.Error("no warning")
			}

			// The same error again: a warning, but no second status write.
			h.snap.ClearActions()
			_, _ = h.run()
			if n := h.statusWrites(); n != 0 {
				t.Errorf("%d status writes for an unchanged error", n)
			}

			// Known handle: the annotation is neither set nor, on a final error, in the way.
			c := content()
			c.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: new("h1")}
			h = newHarness(t, c)
			h.callErr = tc.err
			_, _ = h.run()
			if h.beingCreated[0] || h.stored().Annotations[snapshotter.AnnBeingCreated] != "" {
				t.Error("being-created set for a content whose handle is known")
			}
		})
	}
}

func TestMayBeInProgress(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("transport closed"), true},
		{status.Error(codes.Canceled, ""), true},
		{status.Error(codes.DeadlineExceeded, ""), true},
		{status.Error(codes.Unavailable, ""), true},
		{status.Error(codes.Aborted, ""), true},
		{status.Error(codes.ResourceExhausted, ""), true},
		{status.Error(codes.InvalidArgument, ""), false},
		{status.Error(codes.NotFound, ""), false},
		{status.Error(codes.AlreadyExists, ""), false},
		{status.Error(codes.Internal, ""), false},
		{status.Error(codes.Unimplemented, ""), false},
	} {
		if got := MayBeInProgress(tc.err); got != tc.want {
			name := "nil"
			if tc.err != nil {
				name = strings.TrimSpace(tc.err.Error())
			}
			t.Errorf("MayBeInProgress(%s) = %v, want %v", name, got, tc.want)
		}
	}
}
