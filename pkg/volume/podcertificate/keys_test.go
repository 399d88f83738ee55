package podcertificate

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/kubevol/kubevol/internal/testing/podcertsigner"
)

// Every key type of the API gives a PKCS#8 key of that type and size, and a stub PKCS#10
// request for it with an empty subject and a valid signature (the proof of possession the
// API server checks).
func TestGenerateKeyTypes(t *testing.T) {
	for _, kt := range keyTypes {
		t.Run(kt, func(t *testing.T) {
			k, err := generateKey(kt)
			if err != nil {
				t.Fatal(err)
			}
			b, rest := pem.Decode(k.PEM)
			if b == nil || b.Type != "PRIVATE KEY" || len(rest) != 0 {
				t.Fatalf("key PEM: %q", k.PEM)
			}
			parsed, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(parsed.(crypto.Signer).Public()); got != kt {
				t.Errorf("key is %s", got)
			}
			csr, err := x509.ParseCertificateRequest(k.StubCSR)
			if err != nil {
				t.Fatal(err)
			}
			if err := csr.CheckSignature(); err != nil {
				t.Errorf("stub request signature: %v", err)
			}
			if csr.Subject.String() != "" || len(csr.Extensions) != 0 || len(csr.DNSNames) != 0 {
				t.Errorf("stub request is not empty: subject %q, extensions %v", csr.Subject, csr.Extensions)
			}
			if !k.Signer.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey) {
				t.Error("stub request is for another key")
			}
		})
	}
	if _, err := generateKey("RSA2048"); err == nil || !strings.Contains(err.Error(), `"RSA2048"`) {
		t.Errorf("unknown key type: %v", err)
	}
}

func describe(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return map[int]string{3072: "RSA3072", 4096: "RSA4096"}[k.N.BitLen()]
	case *ecdsa.PublicKey:
		return "ECDSAP" + strings.TrimPrefix(k.Curve.Params().Name, "P-")
	case ed25519.PublicKey:
		return "ED25519"
	}
	return "?"
}

// The chain is projected with every block a bare CERTIFICATE block and nothing between
// them, leaf first; a chain for another key or without a block is refused.
func TestChain(t *testing.T) {
	signer, err := podcertsigner.New()
	if err != nil {
		t.Fatal(err)
	}
	k, err := generateKey(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	pcr := &certificatesv1.PodCertificateRequest{Spec: certificatesv1.PodCertificateRequestSpec{StubPKCS10Request: k.StubCSR}}
	now := time.Now()
	if err := signer.Issue(pcr, now, time.Hour, now.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	blocks := strings.SplitAfter(pcr.Status.CertificateChain, "-----END CERTIFICATE-----\n")
	noisy := "leading text\n" + strings.Replace(blocks[0], "-----BEGIN CERTIFICATE-----\n", "-----BEGIN CERTIFICATE-----\nHeader: x\n\n", 1) + "between\n" + blocks[1] + "trailing"
	got, leaf, err := parseChain(noisy, k.Signer.Public())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != pcr.Status.CertificateChain {
		t.Errorf("cleaned chain:\n%s\nwant\n%s", got, pcr.Status.CertificateChain)
	}
	if !leaf.NotAfter.Equal(pcr.Status.NotAfter.Time) {
		t.Errorf("leaf notAfter %v", leaf.NotAfter)
	}
	other, _ := generateKey(ED25519)
	if _, _, err := parseChain(pcr.Status.CertificateChain, other.Signer.Public()); err == nil {
		t.Error("a chain for another key was accepted")
	}
	if _, _, err := parseChain("no pem here", k.Signer.Public()); err == nil {
		t.Error("a chain without a block was accepted")
	}
}
