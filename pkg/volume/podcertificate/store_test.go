package podcertificate_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubevol/kubevol/internal/testing/podcertsigner"
	"github.com/kubevol/kubevol/pkg/volume/podcertificate"
)

// fakeAPI keeps requests in memory; answer, if set, is the signer's reaction to a new one.
type fakeAPI struct {
	mu       sync.Mutex
	reqs     map[string]*certificatesv1.PodCertificateRequest
	order    []string
	answer   func(*certificatesv1.PodCertificateRequest)
	recorder *record.FakeRecorder
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{reqs: map[string]*certificatesv1.PodCertificateRequest{}, recorder: record.NewFakeRecorder(10)}
}

func (f *fakeAPI) CreatePodCertificateRequest(_ context.Context, _ *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := req.DeepCopy()
	out.Name = fmt.Sprintf("%s%d", req.GenerateName, len(f.order)+1)
	f.reqs[out.Name] = out
	f.order = append(f.order, out.Name)
	if f.answer != nil {
		f.answer(out)
	}
	return out.DeepCopy(), nil
}

func (f *fakeAPI) GetPodCertificateRequest(_ context.Context, _, name string) (*certificatesv1.PodCertificateRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reqs[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "podcertificaterequests"}, name)
	}
	return r.DeepCopy(), nil
}

func (f *fakeAPI) Recorder() record.EventRecorder { return f.recorder }

// set changes a request as its signer would.
func (f *fakeAPI) set(name string, change func(*certificatesv1.PodCertificateRequest)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.reqs[name])
}

func (f *fakeAPI) requests() []*certificatesv1.PodCertificateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*certificatesv1.PodCertificateRequest
	for _, n := range f.order {
		out = append(out, f.reqs[n].DeepCopy())
	}
	return out
}

var testPod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pod-uid"}, Spec: v1.PodSpec{ServiceAccountName: "sa"}}

func source() *v1.PodCertificateProjection {
	maxExp := int32(7200)
	return &v1.PodCertificateProjection{SignerName: "example.com/s", KeyType: podcertificate.ECDSAP384, MaxExpirationSeconds: &maxExp,
		CredentialBundlePath: "bundle.pem", UserAnnotations: map[string]string{"example.com/a": "b"}}
}

// A request carries the pod, its service account, the source's signer, lifetime and
// annotations and a stub request for a fresh key of the source's type; once issued, Get
// returns that key and the chain, and the same ones until the renewal is due.
func TestStoreIssues(t *testing.T) {
	signer, err := podcertsigner.New()
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	api := newFakeAPI()
	api.answer = func(r *certificatesv1.PodCertificateRequest) {
		if err := signer.Issue(r, clk.Now(), 2*time.Hour, clk.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
	}
	s := podcertificate.NewStore(podcertificate.Config{Clock: clk, Jitter: func() time.Duration { return time.Minute }})
	creds, err := s.Get(context.Background(), api, testPod, "v", 0, source())
	if err != nil {
		t.Fatal(err)
	}
	reqs := api.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	sp := r.Spec
	if r.Namespace != "ns" || r.GenerateName != "req-" || sp.PodName != "p" || sp.PodUID != "pod-uid" || sp.ServiceAccountName != "sa" ||
		sp.SignerName != "example.com/s" || *sp.MaxExpirationSeconds != 7200 || sp.UnverifiedUserAnnotations["example.com/a"] != "b" {
		t.Errorf("request: %+v %+v", r.ObjectMeta, sp)
	}
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Kind != "Pod" || r.OwnerReferences[0].UID != "pod-uid" {
		t.Errorf("owner: %+v", r.OwnerReferences)
	}
	checkPair(t, creds, r)
	if !creds.NotAfter.Equal(r.Status.NotAfter.Time) {
		t.Errorf("notAfter %v, want %v", creds.NotAfter, r.Status.NotAfter)
	}
	// Renewal is due at beginRefreshAt plus the jitter: an hour and a minute.
	if d := s.RefreshAfter(testPod.UID, "v"); d != time.Hour+time.Minute {
		t.Errorf("RefreshAfter = %v", d)
	}
	if d := s.RefreshAfter(testPod.UID, "other"); d != 0 {
		t.Errorf("RefreshAfter of another volume = %v", d)
	}
	clk.Step(time.Hour)
	again, err := s.Get(context.Background(), api, testPod, "v", 0, source())
	if err != nil || string(again.Key) != string(creds.Key) || len(api.requests()) != 1 {
		t.Errorf("before the renewal: %v, %d requests", err, len(api.requests()))
	}
}

// checkPair: the key is the one the request was filed for, the chain is the issued one,
// and its leaf is for the key.
func checkPair(t *testing.T, creds *podcertificate.Credentials, r *certificatesv1.PodCertificateRequest) {
	t.Helper()
	if err := podcertsigner.CheckPair(creds.Key, r.Status.CertificateChain, r.Spec.StubPKCS10Request); err != nil {
		t.Error(err)
	}
	if string(creds.Chain) != r.Status.CertificateChain {
		t.Errorf("chain %q, want %q", creds.Chain, r.Status.CertificateChain)
	}
}

// From beginRefreshAt plus the jitter on, Get files a request for a new key; while the
// signer has not answered it the current certificate is served and looked at again every
// 10 s, then the new key and chain replace it. Once the certificate has expired, a renewal
// still unanswered is an error.
func TestStoreRenews(t *testing.T) {
	signer, err := podcertsigner.New()
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	api := newFakeAPI()
	issue := func(r *certificatesv1.PodCertificateRequest) {
		if err := signer.Issue(r, clk.Now(), 2*time.Hour, clk.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
	}
	api.answer = issue
	// The default jitter: the renewal is due within five minutes after beginRefreshAt.
	s := podcertificate.NewStore(podcertificate.Config{Clock: clk, Wait: 100 * time.Millisecond})
	ctx := context.Background()
	first, err := s.Get(ctx, api, testPod, "v", 0, source())
	if err != nil {
		t.Fatal(err)
	}
	due := s.RefreshAfter(testPod.UID, "v")
	if due < time.Hour || due >= time.Hour+5*time.Minute {
		t.Fatalf("RefreshAfter = %v, want in [1h, 1h5m)", due)
	}
	api.answer = nil // the signer is slow with the renewal
	clk.Step(due)
	during, err := s.Get(ctx, api, testPod, "v", 0, source())
	if err != nil || string(during.Key) != string(first.Key) {
		t.Fatalf("while the renewal waits: %v, same key %v", err, err == nil && string(during.Key) == string(first.Key))
	}
	reqs := api.requests()
	if len(reqs) != 2 || string(reqs[1].Spec.StubPKCS10Request) == string(reqs[0].Spec.StubPKCS10Request) {
		t.Fatalf("want a second request for a new key, have %d", len(reqs))
	}
	if d := s.RefreshAfter(testPod.UID, "v"); d != 10*time.Second {
		t.Errorf("RefreshAfter while renewing = %v, want 10s", d)
	}
	// Asked again, the store waits for the same request, and takes its answer.
	if _, err := s.Get(ctx, api, testPod, "v", 0, source()); err != nil || len(api.requests()) != 2 {
		t.Fatalf("again: %v, %d requests", err, len(api.requests()))
	}
	api.set(reqs[1].Name, issue)
	second, err := s.Get(ctx, api, testPod, "v", 0, source())
	if err != nil {
		t.Fatal(err)
	}
	checkPair(t, second, api.requests()[1])
	if string(second.Key) == string(first.Key) {
		t.Error("the key was not renewed")
	}

	checkState(t, s, "fresh")
	// The next renewal is never answered: ten minutes late it is overdue, past notAfter
	// the volume fails.
	clk.Step(s.RefreshAfter(testPod.UID, "v"))
	if _, err := s.Get(ctx, api, testPod, "v", 0, source()); err != nil {
		t.Fatal(err)
	}
	clk.Step(11 * time.Minute)
	checkState(t, s, "overdue_for_refresh")
	clk.Step(2 * time.Hour)
	_, err = s.Get(ctx, api, testPod, "v", 0, source())
	if err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), api.requests()[2].Name) {
		t.Errorf("expired: %v", err)
	}
	if n := len(api.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	checkState(t, s, "expired")
}

// checkState: the store's one source is in state.
func checkState(t *testing.T, s *podcertificate.Store, state string) {
	t.Helper()
	want := map[podcertificate.StateKey]int{{Signer: "example.com/s", State: state}: 1}
	if got := s.States(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("States = %v, want %v", got, want)
	}
}

// A request the signer does not answer fails Get with its name and signer, and the next
// Get waits for the same one, which is used once it is issued.
func TestStoreWaitsForTheSameRequest(t *testing.T) {
	signer, err := podcertsigner.New()
	if err != nil {
		t.Fatal(err)
	}
	api := newFakeAPI()
	s := podcertificate.NewStore(podcertificate.Config{Wait: 100 * time.Millisecond})
	ctx := context.Background()
	for range 2 {
		_, err := s.Get(ctx, api, testPod, "v", 1, source())
		if err == nil || !strings.Contains(err.Error(), "ns/req-1") || !strings.Contains(err.Error(), `"example.com/s"`) || !strings.Contains(err.Error(), "not issued yet") {
			t.Fatalf("pending: %v", err)
		}
	}
	if n := len(api.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if d := s.RefreshAfter(testPod.UID, "v"); d != 0 {
		t.Errorf("RefreshAfter without a certificate = %v", d)
	}
	checkState(t, s, "not_yet_issued")
	api.set("req-1", func(r *certificatesv1.PodCertificateRequest) {
		if err := signer.Issue(r, time.Now(), time.Hour, time.Now().Add(30*time.Minute)); err != nil {
			t.Error(err)
		}
	})
	creds, err := s.Get(ctx, api, testPod, "v", 1, source())
	if err != nil {
		t.Fatal(err)
	}
	checkPair(t, creds, api.requests()[0])
	// Another source of the volume is another request; Forget drops both.
	s.Forget(testPod.UID, "v")
	if _, err := s.Get(ctx, api, testPod, "v", 1, source()); err == nil || len(api.requests()) != 2 {
		t.Errorf("after Forget: %v, %d requests", err, len(api.requests()))
	}
}

// A denied or failed request is final: Get fails with its name, reason and message, files
// no other request, and a Warning event Denied (Failed) is posted once on the pod.
func TestStoreRefused(t *testing.T) {
	for _, cond := range []string{certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed} {
		t.Run(cond, func(t *testing.T) {
			api := newFakeAPI()
			api.answer = func(r *certificatesv1.PodCertificateRequest) {
				podcertsigner.Refuse(r, cond, "UnsupportedKeyType", "use ED25519")
			}
			s := podcertificate.NewStore(podcertificate.Config{})
			for range 2 {
				_, err := s.Get(context.Background(), api, testPod, "v", 0, source())
				if err == nil || !strings.Contains(err.Error(), "ns/req-1") || !strings.Contains(err.Error(), `reason="UnsupportedKeyType"`) || !strings.Contains(err.Error(), "use ED25519") {
					t.Fatalf("refused: %v", err)
				}
			}
			if n := len(api.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			checkState(t, s, strings.ToLower(cond))
			if got := <-api.recorder.Events; !strings.HasPrefix(got, "Warning "+cond+" PodCertificateRequest ns/req-1") {
				t.Errorf("event %q", got)
			}
			select {
			case e := <-api.recorder.Events:
				t.Errorf("second event %q", e)
			default:
			}
		})
	}
}

// A request that disappears (deleted by someone) is waited for ten minutes, the kubelet's
// threshold for informer lag, then replaced by a new one.
func TestStoreReplacesADeletedRequest(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	api := newFakeAPI()
	s := podcertificate.NewStore(podcertificate.Config{Clock: clk, Wait: 50 * time.Millisecond})
	ctx := context.Background()
	if _, err := s.Get(ctx, api, testPod, "v", 0, source()); err == nil {
		t.Fatal("no signer, yet issued")
	}
	api.mu.Lock()
	delete(api.reqs, "req-1")
	api.mu.Unlock()
	clk.Step(9 * time.Minute)
	if _, err := s.Get(ctx, api, testPod, "v", 0, source()); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("gone for 9 minutes: %v", err)
	}
	if n := len(api.requests()); n != 1 {
		t.Fatalf("%d requests after 9 minutes, want 1", n)
	}
	clk.Step(2 * time.Minute)
	_, _ = s.Get(ctx, api, testPod, "v", 0, source()) // gives the request up
	_, err := s.Get(ctx, api, testPod, "v", 0, source())
	if err == nil || !strings.Contains(err.Error(), "req-2") {
		t.Errorf("after 11 minutes: %v, want a second request", err)
	}
}
