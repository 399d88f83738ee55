// Package podcertificate is the node's side of projected podCertificate sources (KEP-4317):
// a private key of the source's keyType, a PodCertificateRequest (certificates.k8s.io/v1)
// for it, the wait for the signer, and the rotation at the certificate's beginRefreshAt, as
// the kubelet's podcertificate manager does. The projected volume plugin writes what Store
// returns; the volume host files and reads the requests.
package podcertificate

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// The key types of PodCertificateProjection.keyType, the API's names.
const (
	RSA3072   = "RSA3072"
	RSA4096   = "RSA4096"
	ECDSAP256 = "ECDSAP256"
	ECDSAP384 = "ECDSAP384"
	ECDSAP521 = "ECDSAP521"
	ED25519   = "ED25519"
)

// keyTypes are the key types the API accepts, all of which are supported.
var keyTypes = []string{RSA3072, RSA4096, ECDSAP256, ECDSAP384, ECDSAP521, ED25519}

// key is a generated private key with what a request carries of it.
type key struct {
	// Signer is the private key.
	Signer crypto.Signer
	// PEM is the key as one PKCS#8 "PRIVATE KEY" block: the first block of a credential
	// bundle and the content of keyPath.
	PEM []byte
	// StubCSR is a DER PKCS#10 request signed by the key with an empty subject and no
	// extensions, the kubelet's spec.stubPKCS10Request: the signer takes only the public
	// key from it, and the API server checks its signature (the proof of possession).
	StubCSR []byte
}

// generateKey makes a key of keyType; an unknown type is an error that names it.
func generateKey(keyType string) (*key, error) {
	var signer crypto.Signer
	var err error
	switch keyType {
	case RSA3072:
		signer, err = rsa.GenerateKey(rand.Reader, 3072)
	case RSA4096:
		signer, err = rsa.GenerateKey(rand.Reader, 4096)
	case ECDSAP256:
		signer, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		signer, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case ECDSAP521:
		signer, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case ED25519:
		_, signer, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, fmt.Errorf("unknown key type %q (want one of %v)", keyType, keyTypes)
	}
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", keyType, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(signer)
	if err != nil {
		return nil, fmt.Errorf("encode %s key: %w", keyType, err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, signer)
	if err != nil {
		return nil, fmt.Errorf("stub PKCS#10 request of a %s key: %w", keyType, err)
	}
	return &key{Signer: signer, PEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), StubCSR: csr}, nil
}

// parseChain is the status.certificateChain of an issued request as the kubelet projects it:
// every block re-encoded as a bare CERTIFICATE block, whatever was between or inside the
// blocks (text, headers) dropped. It checks that the chain has at least one certificate and
// that the first (the leaf) is for key; it returns the leaf.
func parseChain(chain string, key crypto.PublicKey) ([]byte, *x509.Certificate, error) {
	var out bytes.Buffer
	var leaf *x509.Certificate
	rest := []byte(chain)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if leaf == nil {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("leaf certificate: %w", err)
			}
			leaf = c
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})
	}
	if leaf == nil {
		return nil, nil, errors.New("certificate chain holds no PEM block")
	}
	if k, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(key) {
		return nil, nil, errors.New("the leaf certificate is not for the requested key")
	}
	return out.Bytes(), leaf, nil
}
