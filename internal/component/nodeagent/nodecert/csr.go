// Package nodecert obtains and renews a node agent's client certificate through the
// CertificateSigningRequest API, as the kubelet's TLS bootstrap and certificate manager do:
// subject CN system:node:<node>, O system:nodes, signer
// kubernetes.io/kube-apiserver-client-kubelet. The key never leaves the node; the pair is
// kept under the agent's root directory and renewed before it expires.
package nodecert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The identity a node's client certificate carries, as the Node authorizer and
// NodeRestriction read it.
const (
	SignerName     = certificatesv1.KubeAPIServerClientKubeletSignerName
	NodesGroup     = "system:nodes"
	NodeUserPrefix = "system:node:"
)

// Usages are the kubelet's for an ECDSA client key (key encipherment is only for RSA).
var Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

// ErrDenied is returned (wrapped) when the CSR is denied or fails to be signed.
var ErrDenied = errors.New("certificate signing request denied")

// NewKey makes a node key: ECDSA P-256, as the kubelet's.
func NewKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

// RequestPEM is the PEM certificate request for nodeName's client certificate, signed by key.
func RequestPEM(key crypto.Signer, nodeName string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: NodeUserPrefix + nodeName, Organization: []string{NodesGroup}},
	}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// BootstrapName is the CSR name of a bootstrap request: derived from the public key and
// the subject, so an agent restarted while it waits finds its own CSR again instead of
// filing another (the kubelet names its bootstrap CSRs the same way).
func BootstrapName(key crypto.Signer, nodeName string) (string, error) {
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range [][]byte{pub, []byte(NodeUserPrefix + nodeName), []byte(NodesGroup)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	for _, u := range Usages {
		h.Write([]byte(u))
		h.Write([]byte{0})
	}
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// Request files a CSR for nodeName's client certificate and waits until it is issued,
// denied or failed, or ctx ends. name "" lets the API server name it (prefix "csr-", the
// rotation path); a fixed name that already exists is reused if it carries this key.
// It returns the issued certificate chain (PEM).
func Request(ctx context.Context, client kubernetes.Interface, key crypto.Signer, nodeName, name string) ([]byte, error) {
	req, err := RequestPEM(key, nodeName)
	if err != nil {
		return nil, err
	}
	csrs := client.CertificatesV1().CertificateSigningRequests()
	obj := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: SignerName, Usages: Usages,
		},
	}
	if name == "" {
		obj.GenerateName = "csr-"
	}
	created, err := csrs.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && name != "" {
		if created, err = csrs.Get(ctx, name, metav1.GetOptions{}); err == nil {
			err = sameKey(created, key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("certificate signing request for node %s: %w", nodeName, err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Waiting for the client certificate", "csr", klog.KObj(created), "signer", SignerName, "user", NodeUserPrefix+nodeName)
	cert, err := waitIssued(ctx, client, created.Name, created.UID)
	if err != nil {
		return nil, fmt.Errorf("certificate signing request %s for node %s: %w", created.Name, nodeName, err)
	}
	return cert, nil
}

// sameKey refuses an existing CSR whose request is not for key: its certificate would be
// useless without the other key.
func sameKey(csr *certificatesv1.CertificateSigningRequest, key crypto.Signer) error {
	b, _ := pem.Decode(csr.Spec.Request)
	if b == nil {
		return fmt.Errorf("existing %s holds no PEM request", csr.Name)
	}
	r, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return err
	}
	have, _ := x509.MarshalPKIXPublicKey(r.PublicKey)
	want, _ := x509.MarshalPKIXPublicKey(key.Public())
	if !bytes.Equal(have, want) {
		return fmt.Errorf("existing %s was made for another key", csr.Name)
	}
	return nil
}

// waitIssued reads the one CSR, then watches it (a field selector on its name, which a node
// may list and watch) from that version on, until it carries a certificate, or is denied or
// failed. A watch the server closes is resumed with a fresh read.
func waitIssued(ctx context.Context, client kubernetes.Interface, name string, uid types.UID) ([]byte, error) {
	csrs := client.CertificatesV1().CertificateSigningRequests()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second}
	for {
		csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: deleted before it was issued", ErrDenied)
		}
		if err == nil {
			if csr.UID != uid {
				return nil, fmt.Errorf("%w: replaced by another request of the same name", ErrDenied)
			}
			if cert, done, err := answered(csr); done {
				return cert, err
			}
			var w watch.Interface
			if w, err = csrs.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: csr.ResourceVersion}); err == nil {
				cert, done, err := watchAnswer(ctx, w, name, uid)
				if done {
					return cert, err
				}
				backoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second}
				continue
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		klog.FromContext(ctx).V(2).Info("Reading the certificate signing request failed, retrying", "csr", name, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff.Step()):
		}
	}
}

// watchAnswer follows w until the CSR is answered (done), or the watch ends (not done).
func watchAnswer(ctx context.Context, w watch.Interface, name string, uid types.UID) ([]byte, bool, error) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, true, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, false, nil
			}
			csr, isCSR := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if !isCSR || csr.Name != name || csr.UID != uid {
				continue
			}
			if ev.Type == watch.Deleted {
				return nil, true, fmt.Errorf("%w: deleted before it was issued", ErrDenied)
			}
			if cert, done, err := answered(csr); done {
				return cert, true, err
			}
		}
	}
}

// answered reports whether csr carries a certificate, or was denied or failed.
func answered(csr *certificatesv1.CertificateSigningRequest) ([]byte, bool, error) {
	for _, c := range csr.Status.Conditions {
		if (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && c.Status != "False" {
			return nil, true, fmt.Errorf("%w: %s: %s: %s", ErrDenied, c.Type, c.Reason, c.Message)
		}
	}
	if len(csr.Status.Certificate) > 0 {
		return csr.Status.Certificate, true, nil
	}
	return nil, false, nil
}

// issuedFor checks that an issued certificate is for key and names the node, so a
// misbehaving signer cannot hand the agent another identity.
func issuedFor(certPEM []byte, key crypto.Signer, nodeName string) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("issued certificate is not PEM")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, err
	}
	have, _ := x509.MarshalPKIXPublicKey(leaf.PublicKey)
	want, _ := x509.MarshalPKIXPublicKey(key.Public())
	if !bytes.Equal(have, want) {
		return nil, errors.New("issued certificate is for another key")
	}
	if err := checkSubject(leaf, nodeName); err != nil {
		return nil, err
	}
	return leaf, nil
}

func checkSubject(leaf *x509.Certificate, nodeName string) error {
	if leaf.Subject.CommonName != NodeUserPrefix+nodeName || len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != NodesGroup {
		return fmt.Errorf("certificate is for %q %v, not %q [%s]", leaf.Subject.CommonName, leaf.Subject.Organization, NodeUserPrefix+nodeName, NodesGroup)
	}
	return nil
}

// timeLeft is how long a certificate stays valid after now (negative once expired).
func timeLeft(leaf *x509.Certificate, now time.Time) time.Duration { return leaf.NotAfter.Sub(now) }
