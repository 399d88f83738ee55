package node_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/runtime/apicheck"
	"github.com/kubevol/kubevol/internal/testing/podcertsigner"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// Signer names of the test's signer controller.
const (
	issuingSigner = "e2e.kubevol.io/issue"
	denyingSigner = "e2e.kubevol.io/deny"
)

// testSigner answers the namespace's PodCertificateRequests with admin credentials, as a
// signer controller does: requests for issuingSigner get a certificate of the API's
// shortest lifetime (one hour, beginRefreshAt at its earliest, ten minutes in), requests
// for denyingSigner are denied.
type testSigner struct {
	mu       sync.Mutex
	answered map[string]*certificatesv1.PodCertificateRequest
}

func startSigner(t *testing.T, a *agent) *testSigner {
	t.Helper()
	ca, err := podcertsigner.New()
	mustf(t, err, "signer CA")
	s := &testSigner{answered: map[string]*certificatesv1.PodCertificateRequest{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	pcrs := a.client.CertificatesV1().PodCertificateRequests(a.ns)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l, err := pcrs.List(ctx, metav1.ListOptions{})
			for i := range l.Items {
				r := &l.Items[i]
				if err != nil || r.Status.CertificateChain != "" || len(r.Status.Conditions) > 0 {
					continue
				}
				switch r.Spec.SignerName {
				case issuingSigner:
					now := time.Now()
					if err := ca.Issue(r, now, time.Hour, now.Add(10*time.Minute+time.Second)); err != nil {
						t.Errorf("issue %s: %v", r.Name, err)
						continue
					}
				case denyingSigner:
					podcertsigner.Refuse(r, certificatesv1.PodCertificateRequestConditionTypeDenied, "NotAllowed", "this signer issues nothing")
				default:
					continue
				}
				out, err := pcrs.UpdateStatus(ctx, r, metav1.UpdateOptions{})
				if err != nil {
					if ctx.Err() == nil {
						t.Logf("answer %s: %v", r.Name, err)
					}
					continue
				}
				s.mu.Lock()
				s.answered[out.Name] = out
				s.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return s
}

func (s *testSigner) requests(pod *corev1.Pod) []*certificatesv1.PodCertificateRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*certificatesv1.PodCertificateRequest
	for _, r := range s.answered {
		if r.Spec.PodUID == pod.UID {
			out = append(out, r)
		}
	}
	return out
}

func certVolume(signer string) corev1.Volume {
	return corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{PodCertificate: &corev1.PodCertificateProjection{SignerName: signer, KeyType: "ED25519",
			CredentialBundlePath: "bundle.pem", KeyPath: "tls/key.pem", CertificateChainPath: "tls/chain.pem"}},
	}}}}
}

// The agent, as its node only, files a PodCertificateRequest for a pod's podCertificate
// source that NodeRestriction admits (the node's name and UID, the pod's service account
// and UID); once the test's signer issues it the pod's files hold a key that matches the
// leaf of the issued chain. A restarted agent has lost its keys (they are in memory only,
// as the kubelet's), files a second request and replaces the files. A denied request is a
// FailedMount on its pod, with the request's reason, and a Denied event.
func TestPodCertificate(t *testing.T) {
	t.Parallel()
	framework.Requires(t, apicheck.PodCertificateRequests, "podCertificate volumes need PodCertificateRequests of certificates.k8s.io/v1, GA in 1.37 (v1beta1 and off by default in 1.35 and 1.36)")
	a := startAgent(t)
	signer := startSigner(t, a)
	ctx := a.ctx(2 * time.Minute)
	node, err := a.client.CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
	mustf(t, err, "node")

	p := a.create(a.pod("certs", certVolume(issuingSigner)))
	p = a.waitPod(p.Name, time.Minute, "volumes ready", volumesReady)
	reqs := signer.requests(p)
	if len(reqs) != 1 {
		t.Fatalf("%d requests answered for the pod, want 1", len(reqs))
	}
	sp := reqs[0].Spec
	if string(sp.NodeName) != a.name || sp.NodeUID != node.UID || sp.PodName != p.Name || sp.ServiceAccountName != p.Spec.ServiceAccountName {
		t.Errorf("request spec %+v", sp)
	}
	checkNodeAccess(t, a, reqs[0].Name)
	dir := a.volumeDir(p, "kubernetes.io~projected", "certs")
	key1 := checkIssuedFiles(t, dir, reqs[0])
	first := reqs[0].Name

	a.proc.Kill()
	a.proc.Start()
	deadline := time.Now().Add(time.Minute)
	for len(signer.requests(p)) < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	reqs = signer.requests(p)
	if len(reqs) != 2 {
		t.Fatalf("%d requests after the restart, want 2", len(reqs))
	}
	second := reqs[0]
	if second.Name == first {
		second = reqs[1]
	}
	waitFileWithin(t, filepath.Join(dir, "tls/chain.pem"), second.Status.CertificateChain, time.Minute)
	if key2 := checkIssuedFiles(t, dir, second); key2 == key1 {
		t.Error("the key did not change with the second request")
	}

	d := a.create(a.pod("denied", certVolume(denyingSigner)))
	a.waitEvent(d.Name, "FailedMount", `reason="NotAllowed"`, time.Minute)
	a.waitEvent(d.Name, "Denied", "was denied", time.Minute)
	a.waitPod(d.Name, time.Minute, "volumes not ready", func(p *corev1.Pod) bool { return condition(p) == corev1.ConditionFalse })
	if n := len(signer.requests(d)); n != 1 {
		t.Errorf("%d requests for the denied pod, want 1", n)
	}
}

// checkIssuedFiles: the bundle is the key then the issued chain, and the key is the one
// whose public half the request carried and the leaf certifies. It returns the key.
func checkIssuedFiles(t *testing.T, dir string, r *certificatesv1.PodCertificateRequest) string {
	t.Helper()
	bundle := readFile(t, filepath.Join(dir, "bundle.pem"))
	key := readFile(t, filepath.Join(dir, "tls/key.pem"))
	chain := readFile(t, filepath.Join(dir, "tls/chain.pem"))
	if chain != r.Status.CertificateChain || bundle != key+chain {
		t.Fatalf("files are not the issued chain of %s and its key:\n%s", r.Name, bundle)
	}
	if err := podcertsigner.CheckPair([]byte(key), chain, r.Spec.StubPKCS10Request); err != nil {
		t.Errorf("%s and %s: %v", dir, r.Name, err)
	}
	return key
}

// checkNodeAccess asks the API server's authorizers (a SubjectAccessReview) what the node
// may do with PodCertificateRequests: create (NodeRestriction then checks the fields), get
// one that names it, list and watch only with spec.nodeName=<node>, never write a status.
func checkNodeAccess(t *testing.T, a *agent, name string) {
	t.Helper()
	sel := &authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=" + a.name}
	other := &authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=someone-else"}
	for _, c := range []struct {
		verb, name, sub string
		fields          *authorizationv1.FieldSelectorAttributes
		want            bool
	}{
		{verb: "create", want: true},
		{verb: "get", name: name, want: true},
		{verb: "watch", fields: sel, want: true},
		{verb: "list", fields: sel, want: true},
		{verb: "watch", want: false},
		{verb: "watch", fields: other, want: false},
		{verb: "update", name: name, sub: "status", want: false},
		{verb: "delete", name: name, want: false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:node:" + a.name, Groups: []string{"system:nodes", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.ns, Verb: c.verb, Group: "certificates.k8s.io", Version: "v1",
				Resource: "podcertificaterequests", Subresource: c.sub, Name: c.name, FieldSelector: c.fields},
		}}
		out, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(a.ctx(time.Minute), sar, metav1.CreateOptions{})
		mustf(t, err, "SubjectAccessReview")
		if out.Status.Allowed != c.want {
			t.Errorf("node %s %s podcertificaterequests %q/%s fields %v: allowed %v (%s), want %v", a.name, c.verb, c.name, c.sub, c.fields, out.Status.Allowed, out.Status.Reason, c.want)
		}
	}
}
