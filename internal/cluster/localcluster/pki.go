package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kubevol/kubevol/internal/runtime/atomicfile"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// A certificate closer than this to expiry is reissued at start.
	renewBefore = 7 * 24 * time.Hour
)

// Identity is a client certificate subject. Kubernetes authenticates x509 clients by CN
// (user) and O (groups), so these are the RBAC subjects of the local control plane.
type Identity struct {
	Name   string // file base name, e.g. "admin"
	User   string
	Groups []string
}

// Identities used by the local control plane. The controller manager and the scheduler use
// the users that the apiserver's bootstrap RBAC policy grants their permissions.
var (
	AdminIdentity             = Identity{Name: "admin", User: "kubevol-admin", Groups: []string{"system:masters"}}
	controllerManagerIdentity = Identity{Name: "kube-controller-manager", User: "system:kube-controller-manager"}
	schedulerIdentity         = Identity{Name: "kube-scheduler", User: "system:kube-scheduler"}
	// kubeletClientIdentity is the apiserver's own identity towards a kubelet (logs, exec,
	// port-forward), in system:masters as kubeadm's apiserver-kubelet-client was.
	kubeletClientIdentity = Identity{Name: "apiserver-kubelet-client", User: "kube-apiserver-kubelet-client", Groups: []string{"system:masters"}}
)

// PKI is the certificate authority of a local cluster and the files it issued, kept in one
// directory so that a restarted cluster keeps its identity and old kubeconfigs stay valid.
type PKI struct {
	Dir    string
	CACert *x509.Certificate
	caKey  crypto.Signer
}

// CAFile is the PEM CA bundle that verifies every certificate in this PKI.
func (p *PKI) CAFile() string { return filepath.Join(p.Dir, "ca.crt") }

// CertFile and KeyFile name the PEM files of an issued certificate.
func (p *PKI) CertFile(name string) string { return filepath.Join(p.Dir, name+".crt") }
func (p *PKI) KeyFile(name string) string  { return filepath.Join(p.Dir, name+".key") }

// ServiceAccountKeyFile is the private key that signs service-account tokens;
// ServiceAccountPublicKeyFile verifies them.
func (p *PKI) ServiceAccountKeyFile() string       { return filepath.Join(p.Dir, "sa.key") }
func (p *PKI) ServiceAccountPublicKeyFile() string { return filepath.Join(p.Dir, "sa.pub") }

// LoadOrCreatePKI loads the CA in dir, or creates one, and makes sure the serving
// certificate, the service-account key pair and the control-plane client certificates exist.
func LoadOrCreatePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	if err := p.loadOrCreateCA(); err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	if err := p.ensureServing(); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	for _, id := range []Identity{AdminIdentity, controllerManagerIdentity, schedulerIdentity, kubeletClientIdentity} {
		if err := p.EnsureClient(id); err != nil {
			return nil, fmt.Errorf("client certificate %s: %w", id.Name, err)
		}
	}
	if err := p.ensureServiceAccountKey(); err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	return p, nil
}

func (p *PKI) loadOrCreateCA() error {
	cert, key, err := readPair(p.CAFile(), p.KeyFile("ca"))
	if err == nil && time.Until(cert.NotAfter) > renewBefore {
		p.CACert, p.caKey = cert, key
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: "kubevol-local-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	p.CACert, p.caKey = cert, key
	// A new CA invalidates everything it issued before.
	matches, _ := filepath.Glob(filepath.Join(p.Dir, "*.crt"))
	for _, m := range matches {
		_ = os.Remove(m)
	}
	return writePair(p.CAFile(), p.KeyFile("ca"), der, key)
}

// ServingHosts are the names and addresses every control-plane server certificate covers.
var ServingHosts = []string{
	"127.0.0.1", "::1", "localhost",
	"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	"10.96.0.1",
}

func (p *PKI) ensureServing() error {
	return p.EnsureServer("serving", "kubevol-local-server", ServingHosts...)
}

// EnsureServer issues a server certificate named name (CertFile, KeyFile) for hosts (names
// and addresses) unless a valid one exists: for a server the API server calls, such as a
// webhook, which then trusts CAFile.
func (p *PKI) EnsureServer(name, commonName string, hosts ...string) error {
	return p.ensureLeaf(name, func(t *x509.Certificate) {
		t.Subject = pkix.Name{CommonName: commonName}
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				t.IPAddresses = append(t.IPAddresses, ip)
			} else {
				t.DNSNames = append(t.DNSNames, h)
			}
		}
	})
}

// EnsureClient issues a client certificate for id unless a valid one exists.
func (p *PKI) EnsureClient(id Identity) error {
	return p.ensureLeaf(id.Name, func(t *x509.Certificate) {
		t.Subject = pkix.Name{CommonName: id.User, Organization: id.Groups}
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
}

func (p *PKI) ensureLeaf(name string, shape func(*x509.Certificate)) error {
	certFile, keyFile := p.CertFile(name), p.KeyFile(name)
	if cert, _, err := readPair(certFile, keyFile); err == nil {
		if time.Until(cert.NotAfter) > renewBefore && cert.CheckSignatureFrom(p.CACert) == nil {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	shape(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CACert, key.Public(), p.caKey)
	if err != nil {
		return err
	}
	return writePair(certFile, keyFile, der, key)
}

func (p *PKI) ensureServiceAccountKey() error {
	if _, err := os.Stat(p.ServiceAccountKeyFile()); err == nil {
		if _, err := os.Stat(p.ServiceAccountPublicKeyFile()); err == nil {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := writeFileAtomic(p.ServiceAccountKeyFile(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(p.ServiceAccountPublicKeyFile(), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func readPair(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: unsupported key type %T", keyFile, k)
	}
	return cert, signer, nil
}

func writePair(certFile, keyFile string, der []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key goes first: a certificate without its key is never left behind.
	if err := writeFileAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFileAtomic writes through a temporary file and a rename, so a crash never leaves
// a truncated certificate or kubeconfig.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode)
}
