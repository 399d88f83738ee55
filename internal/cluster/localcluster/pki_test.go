package localcluster

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestPKIIssuesVerifiableCertificates(t *testing.T) {
	p, err := LoadOrCreatePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CACert)

	serving := readCert(t, p.CertFile("serving"))
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", host, err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("serving certificate verifies for a host it must not cover")
	}

	admin := readCert(t, p.CertFile(AdminIdentity.Name))
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate is not a valid client certificate: %v", err)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("admin certificate must not be usable as a server certificate")
	}
	if admin.Subject.CommonName != AdminIdentity.User || !slices.Equal(admin.Subject.Organization, AdminIdentity.Groups) {
		t.Errorf("admin subject = %v, want CN=%s O=%v", admin.Subject, AdminIdentity.User, AdminIdentity.Groups)
	}
	kcm := readCert(t, p.CertFile(controllerManagerIdentity.Name))
	if kcm.Subject.CommonName != "system:kube-controller-manager" {
		t.Errorf("controller-manager CN = %q", kcm.Subject.CommonName)
	}

	for _, f := range []string{p.KeyFile("ca"), p.KeyFile("admin"), p.ServiceAccountKeyFile()} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is readable by others: %v", f, st.Mode().Perm())
		}
	}
}

func TestPKIIsReusedAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	adminBefore, _ := os.ReadFile(first.CertFile("admin"))
	second, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !first.CACert.Equal(second.CACert) {
		t.Fatal("a second load created a new CA; existing kubeconfigs would break")
	}
	adminAfter, _ := os.ReadFile(second.CertFile("admin"))
	if string(adminBefore) != string(adminAfter) {
		t.Fatal("a valid client certificate was reissued")
	}

	// A lost CA key means a new CA, and every leaf must be reissued under it.
	if err := os.Remove(first.KeyFile("ca")); err != nil {
		t.Fatal(err)
	}
	third, err := LoadOrCreatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if third.CACert.Equal(first.CACert) {
		t.Fatal("CA was not regenerated after its key was lost")
	}
	roots := x509.NewCertPool()
	roots.AddCert(third.CACert)
	if _, err := readCert(t, third.CertFile("admin")).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("admin certificate not reissued under the new CA: %v", err)
	}
}

func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	p, err := LoadOrCreatePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	const server = "https://127.0.0.1:6443"
	if err := p.WriteKubeconfig(path, server, AdminIdentity); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode = %v, want 0600: it holds a private key", st.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig does not load: %v", err)
	}
	if cfg.Host != server {
		t.Errorf("host = %q, want %q", cfg.Host, server)
	}
	caPEM, _ := os.ReadFile(p.CAFile())
	if string(cfg.CAData) != string(caPEM) {
		t.Error("kubeconfig does not embed the cluster CA")
	}
	certPEM, _ := os.ReadFile(p.CertFile("admin"))
	if string(cfg.CertData) != string(certPEM) || len(cfg.KeyData) == 0 {
		t.Error("kubeconfig does not embed the admin client certificate and key")
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if raw.CurrentContext != contextName {
		t.Errorf("current context = %q, want %q", raw.CurrentContext, contextName)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	cert, _, err := readPair(path, path[:len(path)-len(".crt")]+".key")
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
