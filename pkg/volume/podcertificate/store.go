package podcertificate

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// API files and reads PodCertificateRequests; volume.Host implements it.
type API interface {
	// CreatePodCertificateRequest creates req in the pod's namespace once it has filled in
	// what NodeRestriction checks against the node and the pod's service account
	// (spec.nodeName, spec.nodeUID, spec.serviceAccountUID).
	CreatePodCertificateRequest(ctx context.Context, pod *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error)
	// GetPodCertificateRequest reads one request.
	GetPodCertificateRequest(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error)
	// Recorder receives the pod's Denied and Failed events.
	Recorder() record.EventRecorder
}

// Config configures a Store; the zero value is the kubelet's behaviour.
type Config struct {
	// Clock decides when a certificate is due for refresh or expired; default the real one.
	Clock clock.PassiveClock
	// Jitter is added to each certificate's beginRefreshAt so that volumes do not renew in
	// step; default uniform in [0, 5 min), the kubelet's.
	Jitter func() time.Duration
	// Wait bounds how long one Get waits for the signer to answer; default 10 s.
	Wait time.Duration
}

// Store holds the key, certificate and pending request of each podCertificate source of
// each pod, in memory only, as the kubelet: after a restart every source gets a new key
// and a new request. Its methods are safe for concurrent use.
type Store struct {
	cfg     Config
	mu      sync.Mutex
	records map[source]*state
}

// source names one podCertificate source: its pod, projected volume and index in the
// volume's sources (the kubelet's projection key).
type source struct {
	Pod    types.UID
	Volume string
	Index  int
}

// Credentials are what a source projects.
type Credentials struct {
	// Key is the PKCS#8 PEM of the private key.
	Key []byte
	// Chain is the PEM of the certificate chain, leaf first.
	Chain []byte
	// NotAfter is when the leaf expires.
	NotAfter time.Time
}

// state is the state of one source: issued credentials (with when to renew them), a
// request waiting for its signer (the first one, or a renewal), or a final refusal.
type state struct {
	// op serializes the Gets of the source (one request at a time); mu guards the fields,
	// which Get changes only while it holds op, and is never held while waiting, so that
	// RefreshAfter and States never wait for a signer.
	op        sync.Mutex
	mu        sync.Mutex
	signer    string
	creds     *Credentials
	refreshAt time.Time
	pending   *pendingRequest
	refused   error
	// refusal is the condition type of refused: Denied or Failed.
	refusal string
}

type pendingRequest struct {
	name    string
	key     *key
	created time.Time
}

const (
	defaultWait = 10 * time.Second
	// maxJitter is the kubelet's spread of renewals after beginRefreshAt.
	maxJitter = 5 * time.Minute
	// abandonAfter: a request not found this long after its creation was deleted (the
	// kubelet's assumeDeletedThreshold), and a new one is filed.
	abandonAfter = 10 * time.Minute
	// renewRetry is how soon a renewal that the signer has not answered yet is looked at
	// again, while the current certificate is still served.
	renewRetry = 10 * time.Second
	// minRefresh bounds how soon a volume is set up again.
	minRefresh = time.Second
	// The request is read from 50 ms doubling up to 1 s while Get waits.
	pollStart = 50 * time.Millisecond
	pollMax   = time.Second
)

// NewStore returns an empty Store.
func NewStore(cfg Config) *Store {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Jitter == nil {
		cfg.Jitter = func() time.Duration { return rand.N(maxJitter) }
	}
	if cfg.Wait <= 0 {
		cfg.Wait = defaultWait
	}
	return &Store{cfg: cfg, records: map[source]*state{}}
}

// Get returns the credentials of a source of pod. The first call makes a key and files a
// request, and every call waits up to Config.Wait for the signer:
//
//   - issued: the key and the chain; from beginRefreshAt (plus jitter) on, a new key and
//     request replace them, and until that one is issued the current ones are returned
//     while they are valid (an error once they have expired);
//   - denied or failed: an error naming the request, its reason and message, then the same
//     error on every call (the kubelet's permanent refusal; the pod's controller makes a new
//     pod), and a Warning event Denied or Failed on the pod;
//   - not answered yet: an error naming the request and its signer; the next call waits
//     for the same request.
func (s *Store) Get(ctx context.Context, api API, pod *v1.Pod, volume string, index int, src *v1.PodCertificateProjection) (*Credentials, error) {
	rec := s.state(source{Pod: pod.UID, Volume: volume, Index: index})
	rec.op.Lock()
	defer rec.op.Unlock()
	rec.set(func() { rec.signer = src.SignerName })
	// Only this goroutine changes the fields while it holds op: they are read without mu.
	if rec.refused != nil {
		return nil, rec.refused
	}
	if rec.creds != nil && s.cfg.Clock.Now().Before(rec.refreshAt) {
		return rec.creds, nil
	}
	err := s.renew(ctx, api, rec, pod, src)
	switch {
	case err == nil:
		return rec.creds, nil
	case rec.refused == nil && rec.creds != nil && s.cfg.Clock.Now().Before(rec.creds.NotAfter):
		// A renewal that fails is not the pod's problem while its certificate is valid.
		klog.FromContext(ctx).V(2).Info("Pod certificate not renewed yet; the current one is kept", "pod", klog.KObj(pod),
			"volume", volume, "notAfter", rec.creds.NotAfter, "reason", err.Error())
		return rec.creds, nil
	case rec.creds != nil && rec.refused == nil:
		return nil, fmt.Errorf("the certificate expired at %s and its renewal failed: %w", rec.creds.NotAfter.UTC().Format(time.RFC3339), err)
	}
	return nil, err
}

// set changes the fields of r under its lock.
func (r *state) set(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// renew files a request if none is pending and waits for its answer; the caller holds op.
func (s *Store) renew(ctx context.Context, api API, rec *state, pod *v1.Pod, src *v1.PodCertificateProjection) error {
	p := rec.pending
	if p == nil {
		var err error
		if p, err = s.file(ctx, api, pod, src); err != nil {
			return err
		}
		rec.set(func() { rec.pending = p })
	}
	pcr, err := s.wait(ctx, api, pod.Namespace, p.name)
	if err != nil {
		// A deleted request is NotFound, or Forbidden to a node (the authorizer's graph
		// forgets it too).
		gone := apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
		if gone && s.cfg.Clock.Now().After(p.created.Add(abandonAfter)) {
			rec.set(func() { rec.pending = nil })
		}
		return fmt.Errorf("PodCertificateRequest %s/%s for signer %q: %w", pod.Namespace, p.name, src.SignerName, err)
	}
	if c := refusal(pcr); c != nil {
		verb := map[string]string{certificatesv1.PodCertificateRequestConditionTypeDenied: "was denied", certificatesv1.PodCertificateRequestConditionTypeFailed: "failed"}[c.Type]
		msg := fmt.Sprintf("PodCertificateRequest %s/%s %s by signer %q: reason=%q message=%q", pod.Namespace, p.name, verb, src.SignerName, c.Reason, c.Message)
		rec.set(func() { rec.pending, rec.refused, rec.refusal = nil, errors.New(msg), c.Type })
		api.Recorder().Event(pod, v1.EventTypeWarning, c.Type, msg)
		return rec.refused
	}
	chain, leaf, err := parseChain(pcr.Status.CertificateChain, p.key.Signer.Public())
	if err != nil {
		// The API server validates issued chains; one that still does not fit is the
		// signer's bug, and a new request may fare better.
		rec.set(func() { rec.pending = nil })
		return fmt.Errorf("PodCertificateRequest %s/%s: %w", pod.Namespace, p.name, err)
	}
	creds := &Credentials{Key: p.key.PEM, Chain: chain, NotAfter: leaf.NotAfter}
	if pcr.Status.NotAfter != nil {
		creds.NotAfter = pcr.Status.NotAfter.Time
	}
	due := refreshAt(pcr, leaf).Add(s.cfg.Jitter())
	rec.set(func() { rec.pending, rec.creds, rec.refreshAt = nil, creds, due })
	return nil
}

// refreshAt is the signer's beginRefreshAt, or half the lifetime if it gave none.
func refreshAt(pcr *certificatesv1.PodCertificateRequest, leaf *x509.Certificate) time.Time {
	if pcr.Status.BeginRefreshAt != nil {
		return pcr.Status.BeginRefreshAt.Time
	}
	return leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
}

// file makes a key and creates its request, owned by the pod so that the garbage collector
// removes it with the pod (the kubelet's request, generateName "req-").
func (s *Store) file(ctx context.Context, api API, pod *v1.Pod, src *v1.PodCertificateProjection) (*pendingRequest, error) {
	key, err := generateKey(src.KeyType)
	if err != nil {
		return nil, err
	}
	req := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, GenerateName: "req-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName:                src.SignerName,
			PodName:                   pod.Name,
			PodUID:                    pod.UID,
			ServiceAccountName:        pod.Spec.ServiceAccountName,
			MaxExpirationSeconds:      src.MaxExpirationSeconds,
			StubPKCS10Request:         key.StubCSR,
			UnverifiedUserAnnotations: src.UserAnnotations,
		},
	}
	out, err := api.CreatePodCertificateRequest(ctx, pod, req)
	if err != nil {
		return nil, fmt.Errorf("create PodCertificateRequest for signer %q: %w", src.SignerName, err)
	}
	return &pendingRequest{name: out.Name, key: key, created: s.cfg.Clock.Now()}, nil
}

// errNotIssued is why a request that the signer has not answered yet fails a Get.
var errNotIssued = errors.New("not issued yet")

// wait reads the request until the signer has answered it, for at most Config.Wait. A
// request not found or refused to the node is waited for: the node's authorizer and an API
// server behind a cache see a new request a moment late.
func (s *Store) wait(ctx context.Context, api API, namespace, name string) (*certificatesv1.PodCertificateRequest, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	delay := pollStart
	var last error
	for {
		pcr, err := api.GetPodCertificateRequest(ctx, namespace, name)
		switch {
		case err == nil && (pcr.Status.CertificateChain != "" || refusal(pcr) != nil):
			return pcr, nil
		case err == nil:
			last = errNotIssued
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			last = err
		case ctx.Err() == nil:
			return nil, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, last
		case <-t.C:
		}
		delay = min(2*delay, pollMax)
	}
}

// refusal is the request's Denied or Failed condition, if any.
func refusal(pcr *certificatesv1.PodCertificateRequest) *metav1.Condition {
	for i, c := range pcr.Status.Conditions {
		if c.Status == metav1.ConditionTrue && (c.Type == certificatesv1.PodCertificateRequestConditionTypeDenied || c.Type == certificatesv1.PodCertificateRequestConditionTypeFailed) {
			return &pcr.Status.Conditions[i]
		}
	}
	return nil
}

func (s *Store) state(src source) *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[src]
	if r == nil {
		r = &state{}
		s.records[src] = r
	}
	return r
}

// RefreshAfter is how soon the sources of a pod's volume need a Get again: the earliest
// renewal, renewRetry while a renewal waits for its signer; 0 if none has a certificate.
func (s *Store) RefreshAfter(pod types.UID, volume string) time.Duration {
	s.mu.Lock()
	var recs []*state
	for k, r := range s.records {
		if k.Pod == pod && k.Volume == volume {
			recs = append(recs, r)
		}
	}
	s.mu.Unlock()
	now := s.cfg.Clock.Now()
	var next time.Duration
	for _, r := range recs {
		r.mu.Lock()
		if r.creds != nil && r.refused == nil {
			d := r.refreshAt.Sub(now)
			if r.pending != nil || d <= 0 {
				d = renewRetry
			}
			if next == 0 || d < next {
				next = max(d, minRefresh)
			}
		}
		r.mu.Unlock()
	}
	return next
}

// StateKey is a signer and a state of its sources, as the kubelet's
// kubelet_podcertificate_states reports them.
type StateKey struct {
	Signer string
	// State is not_yet_issued, fresh, overdue_for_refresh (ten minutes past the renewal
	// time), expired, denied or failed.
	State string
}

// overdueAfter is how long after its renewal time a certificate is overdue.
const overdueAfter = 10 * time.Minute

// States counts the sources by signer and state.
func (s *Store) States() map[StateKey]int {
	s.mu.Lock()
	recs := make([]*state, 0, len(s.records))
	for _, r := range s.records {
		recs = append(recs, r)
	}
	s.mu.Unlock()
	now := s.cfg.Clock.Now()
	out := map[StateKey]int{}
	for _, r := range recs {
		r.mu.Lock()
		k := StateKey{Signer: r.signer}
		switch {
		case r.refused != nil:
			k.State = strings.ToLower(r.refusal)
		case r.creds == nil:
			k.State = "not_yet_issued"
		case now.After(r.creds.NotAfter):
			k.State = "expired"
		case now.After(r.refreshAt.Add(overdueAfter)):
			k.State = "overdue_for_refresh"
		default:
			k.State = "fresh"
		}
		r.mu.Unlock()
		if k.Signer != "" {
			out[k]++
		}
	}
	return out
}

// Forget drops what is held for a pod's volume, when it is torn down.
func (s *Store) Forget(pod types.UID, volume string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.records {
		if k.Pod == pod && k.Volume == volume {
			delete(s.records, k)
		}
	}
}
