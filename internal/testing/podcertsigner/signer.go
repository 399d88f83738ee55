// Package podcertsigner is a signer of PodCertificateRequests for tests, as a signer
// controller answers them: it issues a certificate from its own CA for the request's key
// (the public key of spec.stubPKCS10Request), or denies or fails the request. It sets the
// status only; the caller writes it (UpdateStatus, or a fake clientset).
package podcertsigner

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Signer holds a CA.
type Signer struct {
	CA    *x509.Certificate
	caKey crypto.Signer
}

// New makes a CA valid for a day.
func New() (*Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podcertsigner test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Signer{CA: ca, caKey: key}, nil
}

// Issue sets pcr's status to a certificate for its key valid from notBefore for lifetime,
// to be renewed from beginRefreshAt, and the chain leaf then CA. Times are whole seconds, as
// a certificate holds them (the API server wants status and leaf to agree).
func (s *Signer) Issue(pcr *certificatesv1.PodCertificateRequest, notBefore time.Time, lifetime time.Duration, beginRefreshAt time.Time) error {
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		return fmt.Errorf("stubPKCS10Request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return fmt.Errorf("stubPKCS10Request signature: %w", err)
	}
	notBefore = notBefore.Truncate(time.Second)
	notAfter := notBefore.Add(lifetime)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: pcr.Namespace + "/" + pcr.Spec.PodName},
		NotBefore:    notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.CA, csr.PublicKey, s.caKey)
	if err != nil {
		return err
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.CA.Raw})...)
	pcr.Status.CertificateChain = string(chain)
	pcr.Status.NotBefore = &metav1.Time{Time: notBefore}
	pcr.Status.NotAfter = &metav1.Time{Time: notAfter}
	pcr.Status.BeginRefreshAt = &metav1.Time{Time: beginRefreshAt.Truncate(time.Second)}
	pcr.Status.Conditions = []metav1.Condition{condition(certificatesv1.PodCertificateRequestConditionTypeIssued, "Issued", "issued by the test signer")}
	return nil
}

// Refuse sets pcr's status to a Denied or Failed condition (conditionType) with reason
// and message.
func Refuse(pcr *certificatesv1.PodCertificateRequest, conditionType, reason, message string) {
	pcr.Status = certificatesv1.PodCertificateRequestStatus{Conditions: []metav1.Condition{condition(conditionType, reason, message)}}
}

func condition(t, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		LastTransitionTime: metav1.Now()}
}

// CheckPair reports whether a projected key (PKCS#8 PEM) is the one a request was filed
// for (its stubPKCS10Request's public key) and the one the leaf of chain certifies.
func CheckPair(keyPEM []byte, chain string, stubCSR []byte) error {
	b, _ := pem.Decode(keyPEM)
	if b == nil || b.Type != "PRIVATE KEY" {
		return fmt.Errorf("key is not one PRIVATE KEY block: %q", keyPEM)
	}
	key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return err
	}
	lb, _ := pem.Decode([]byte(chain))
	if lb == nil {
		return fmt.Errorf("no certificate in the chain")
	}
	leaf, err := x509.ParseCertificate(lb.Bytes)
	if err != nil {
		return err
	}
	csr, err := x509.ParseCertificateRequest(stubCSR)
	if err != nil {
		return err
	}
	pub := key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool })
	switch {
	case !pub.Equal(csr.PublicKey):
		return fmt.Errorf("the key is not the request's")
	case !pub.Equal(leaf.PublicKey):
		return fmt.Errorf("the key is not the leaf certificate's")
	}
	return nil
}
