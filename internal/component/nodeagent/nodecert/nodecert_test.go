package nodecert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// signer is a fake csrsigning controller: it answers every created CSR at once.
type signer struct {
	t        *testing.T
	ca       *x509.Certificate
	caKey    *ecdsa.PrivateKey
	validity time.Duration
	deny     bool
	cn       string // overrides the issued CN when set

	mu      sync.Mutex
	created []*certificatesv1.CertificateSigningRequest
	n       int
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour * 24 * 400)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return &signer{t: t, ca: ca, caKey: key, validity: 24 * time.Hour}
}

func (s *signer) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		csr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.n++
		if csr.Name == "" {
			csr.Name = csr.GenerateName + string(rune('a'+s.n))
		}
		csr.UID = types.UID(csr.Name)
		s.created = append(s.created, csr.DeepCopy())
		if s.deny {
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: "True", Reason: "NotYours", Message: "no"}}
		} else {
			csr.Status.Certificate = s.sign(csr.Spec.Request)
		}
		return false, nil, nil // the tracker stores the answered object
	})
	return c
}

func (s *signer) sign(reqPEM []byte) []byte {
	b, _ := pem.Decode(reqPEM)
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		s.t.Fatal(err)
	}
	subj := req.Subject
	if s.cn != "" {
		subj.CommonName = s.cn
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: subj,
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(s.validity), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		s.ca, req.PublicKey, s.caKey)
	if err != nil {
		s.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (s *signer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created)
}

const bootstrapToken = "abcdef.0123456789abcdef"

// fixture is a manager whose clients all go to one fake API server; used records which
// credential each client was built from.
type fixture struct {
	m    *Manager
	s    *signer
	c    *fake.Clientset
	dir  string
	used []string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{s: newSigner(t), dir: t.TempDir()}
	f.c = f.s.client()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.s.ca.Raw})
	f.m = New(Config{
		NodeName: "n1", Kubeconfig: filepath.Join(f.dir, "kubeconfig"), CertDir: filepath.Join(f.dir, "pki"),
		Bootstrap: &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: bootstrapToken, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}},
		NewClient: func(c *rest.Config) (kubernetes.Interface, error) {
			if c.BearerToken != "" {
				f.used = append(f.used, "bootstrap")
			} else {
				f.used = append(f.used, "node:"+c.CertFile)
			}
			return f.c, nil
		},
	})
	return f
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestRequestPEM(t *testing.T) {
	key, _ := NewKey()
	p, err := RequestPEM(key, "n1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(p)
	r, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckSignature(); err != nil {
		t.Fatal(err)
	}
	if r.Subject.CommonName != "system:node:n1" || len(r.Subject.Organization) != 1 || r.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %v", r.Subject)
	}
	if len(r.DNSNames)+len(r.IPAddresses)+len(r.EmailAddresses)+len(r.URIs) != 0 {
		t.Errorf("request has SANs: %v %v %v %v", r.DNSNames, r.IPAddresses, r.EmailAddresses, r.URIs)
	}
}

func TestBootstrapName(t *testing.T) {
	k1, _ := NewKey()
	k2, _ := NewKey()
	a, _ := BootstrapName(k1, "n1")
	b, _ := BootstrapName(k1, "n1")
	c, _ := BootstrapName(k2, "n1")
	d, _ := BootstrapName(k1, "n2")
	if a != b || a == c || a == d || !strings.HasPrefix(a, "node-csr-") {
		t.Errorf("names %s %s %s %s", a, b, c, d)
	}
}

func TestEnsureBootstrapsAndStores(t *testing.T) {
	f := newFixture(t)
	cfg, err := f.m.Ensure(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.s.created) != 1 {
		t.Fatalf("%d CSRs, want 1", len(f.s.created))
	}
	csr := f.s.created[0]
	if csr.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" || len(csr.Spec.Usages) != 2 ||
		csr.Spec.Usages[0] != certificatesv1.UsageDigitalSignature || csr.Spec.Usages[1] != certificatesv1.UsageClientAuth {
		t.Errorf("CSR spec %+v", csr.Spec)
	}
	if !strings.HasPrefix(csr.Name, "node-csr-") {
		t.Errorf("bootstrap CSR name %q", csr.Name)
	}
	if cfg.CertFile != f.m.Store().CurrentPath() || cfg.KeyFile != cfg.CertFile || cfg.BearerToken != "" {
		t.Errorf("node config: cert %q key %q token set %v", cfg.CertFile, cfg.KeyFile, cfg.BearerToken != "")
	}
	if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CAData) == 0 {
		t.Errorf("node config: host %q, CA %d bytes", cfg.Host, len(cfg.CAData))
	}
	for p, want := range map[string]os.FileMode{f.m.cfg.Kubeconfig: 0o600, f.m.Store().CurrentPath(): 0o600, f.m.Store().Dir: 0o700} {
		if got := mode(t, p); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
	kc, _ := os.ReadFile(f.m.cfg.Kubeconfig)
	if strings.Contains(string(kc), bootstrapToken) || strings.Contains(string(kc), "PRIVATE KEY") {
		t.Errorf("the kubeconfig holds the bootstrap token or the key:\n%s", kc)
	}
	if _, err := os.Stat(filepath.Join(f.m.Store().Dir, pendingKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pending key left: %v", err)
	}
	pair, err := f.m.Store().Current()
	if err != nil || pair.Leaf.Subject.CommonName != "system:node:n1" {
		t.Fatalf("stored pair: %v %v", err, pair)
	}
	// Nothing else in the directory: no temporary file survives the atomic writes.
	entries, _ := os.ReadDir(f.m.Store().Dir)
	if len(entries) != 1 {
		t.Errorf("certificate dir holds %d entries, want 1", len(entries))
	}

	// A valid credential is kept: no second request.
	if _, err := f.m.Ensure(ctx(t)); err != nil || f.s.count() != 1 {
		t.Errorf("second Ensure: %v, %d CSRs", err, f.s.count())
	}
}

// A restarted agent finds the bootstrap CSR it filed before and waits for it.
func TestEnsureReusesPendingRequest(t *testing.T) {
	f := newFixture(t)
	key, err := f.m.Store().PendingKey()
	if err != nil {
		t.Fatal(err)
	}
	name, _ := BootstrapName(key, "n1")
	req, _ := RequestPEM(key, "n1")
	_, err = f.c.CertificatesV1().CertificateSigningRequests().Create(ctx(t), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: SignerName, Usages: Usages}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The reactor saw the first create and the agent's attempt, which found the CSR.
	if n := f.s.count(); n != 2 {
		t.Errorf("%d creates, want 2", n)
	}
	pair, _ := f.m.Store().Current()
	if !pair.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Error("stored certificate is not for the pending key")
	}
}

func TestEnsureDenied(t *testing.T) {
	f := newFixture(t)
	f.s.deny = true
	_, err := f.m.Ensure(ctx(t))
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "NotYours") {
		t.Fatalf("err = %v, want a denial naming the reason", err)
	}
	if _, err := os.Stat(f.m.cfg.Kubeconfig); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kubeconfig written after a denial: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.m.Store().Dir, pendingKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the denied request's key is kept: %v", err)
	}
}

// A signer that issues another identity is not believed.
func TestEnsureRefusesOtherIdentity(t *testing.T) {
	f := newFixture(t)
	f.s.cn = "system:node:n2"
	if _, err := f.m.Ensure(ctx(t)); err == nil || !strings.Contains(err.Error(), "system:node:n2") {
		t.Fatalf("err = %v", err)
	}
	if _, err := f.m.Store().Current(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a certificate for another node was stored: %v", err)
	}
}

func TestEnsureWithoutBootstrap(t *testing.T) {
	f := newFixture(t)
	f.m.cfg.Bootstrap = nil
	if _, err := f.m.Ensure(ctx(t)); err == nil || !strings.Contains(err.Error(), "no bootstrap kubeconfig") {
		t.Fatalf("err = %v", err)
	}
}

func TestRotationDeadline(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(100 * time.Hour)}
	for _, c := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 70 * time.Hour}, {0.5, 80 * time.Hour}, {0.999999, 90 * time.Hour}} {
		got := RotationDeadline(leaf, c.jitter).Sub(nb)
		if (got - c.want).Abs() > time.Second {
			t.Errorf("jitter %v: deadline at %v of the lifetime, want %v", c.jitter, got, c.want)
		}
	}
}

func TestRotate(t *testing.T) {
	f := newFixture(t)
	if _, err := f.m.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	before, _ := f.m.Store().Current()
	kcBefore, _ := os.ReadFile(f.m.cfg.Kubeconfig)
	f.used = nil
	if err := f.m.Rotate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	after, _ := f.m.Store().Current()
	if after.Leaf.SerialNumber.Cmp(before.Leaf.SerialNumber) == 0 {
		t.Error("certificate not replaced")
	}
	if after.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(before.Leaf.PublicKey) {
		t.Error("a renewal reused the key")
	}
	if len(f.used) != 1 || f.used[0] != "node:"+f.m.Store().CurrentPath() {
		t.Errorf("renewal requested with %v, want the node's own certificate", f.used)
	}
	if last := f.s.created[len(f.s.created)-1]; last.GenerateName != "csr-" {
		t.Errorf("renewal CSR generateName %q, want csr-", last.GenerateName)
	}
	if kc, _ := os.ReadFile(f.m.cfg.Kubeconfig); string(kc) != string(kcBefore) {
		t.Error("the kubeconfig changed although it points at the stored pair")
	}

	// Once expired, the certificate cannot renew itself: the bootstrap credential does.
	f.used = nil
	f.m.cfg.Now = func() time.Time { return time.Now().Add(48 * time.Hour) }
	if err := f.m.Rotate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if len(f.used) != 1 || f.used[0] != "bootstrap" {
		t.Errorf("renewal of an expired certificate used %v", f.used)
	}
}

// An expired certificate at start is bootstrapped again.
func TestEnsureExpired(t *testing.T) {
	f := newFixture(t)
	if _, err := f.m.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	f.m.cfg.Now = func() time.Time { return time.Now().Add(24*time.Hour - 30*time.Second) }
	if _, err := f.m.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := f.s.count(); n != 2 {
		t.Errorf("%d CSRs, want a second bootstrap", n)
	}
}

// An admin's kubeconfig passed as the node's by mistake is kept, not overwritten.
func TestEnsureKeepsForeignKubeconfig(t *testing.T) {
	f := newFixture(t)
	if _, err := f.m.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	other := New(Config{NodeName: "n2", Kubeconfig: f.m.cfg.Kubeconfig, CertDir: filepath.Join(f.dir, "pki2"), Bootstrap: f.m.cfg.Bootstrap, NewClient: f.m.cfg.NewClient})
	before, _ := os.ReadFile(f.m.cfg.Kubeconfig)
	if _, err := other.Ensure(ctx(t)); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v", err)
	}
	if after, _ := os.ReadFile(f.m.cfg.Kubeconfig); string(after) != string(before) {
		t.Error("the other node's kubeconfig was overwritten")
	}
	token := filepath.Join(f.dir, "token.kubeconfig")
	if err := os.WriteFile(token, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: https://x}}]\nusers: [{name: u, user: {token: abc}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other.cfg.Kubeconfig = token
	if _, err := other.Ensure(ctx(t)); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("token kubeconfig: err = %v", err)
	}
}

// Run renews a certificate past its rotation deadline, as the node itself, and stops with
// its context.
func TestRunRenewsAtDeadline(t *testing.T) {
	f := newFixture(t)
	if _, err := f.m.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	offset := 20 * time.Hour // past 70-90% of the 24 h lifetime
	f.m.cfg.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(offset)
	}
	f.m.cfg.Jitter = func() float64 { return 0.5 }
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan struct{})
	go func() { f.m.Run(c); close(done) }()
	if err := wait.PollUntilContextTimeout(c, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return f.s.count() >= 2, nil }); err != nil {
		t.Fatal("no renewal")
	}
	mu.Lock()
	offset = 0 // the renewed certificate is fresh: Run sleeps until its deadline
	mu.Unlock()
	cancel()
	<-done
	if last := f.s.created[len(f.s.created)-1]; last.GenerateName != "csr-" {
		t.Errorf("renewal CSR %+v", last.ObjectMeta)
	}
}
