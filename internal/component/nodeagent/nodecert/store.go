package nodecert

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubevol/kubevol/internal/runtime/atomicfile"
)

// File names in the certificate directory, after the kubelet's kubelet-client-current.pem.
const (
	currentFile    = "kubevol-client-current.pem"
	pendingKeyFile = "kubevol-client.key.tmp"
)

// Store keeps the node's key and certificate in one directory, readable by root only. The
// current pair is one PEM file (certificate chain, then key), replaced atomically, so the
// API client that reloads it never reads a certificate without its key.
type Store struct{ Dir string }

// CurrentPath is the PEM file with the current certificate and key; kubeconfigs point
// their client-certificate and client-key at it.
func (s Store) CurrentPath() string { return filepath.Join(s.Dir, currentFile) }

// Current loads the current pair; an error wrapping os.ErrNotExist means there is none.
func (s Store) Current() (*tls.Certificate, error) {
	return loadPair(s.CurrentPath(), s.CurrentPath())
}

func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}

// Save checks that certPEM goes with key and replaces the current pair with it.
func (s Store) Save(certPEM []byte, key crypto.Signer) (*tls.Certificate, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("issued certificate: %w", err)
	}
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	data := append(append(append([]byte{}, certPEM...), '\n'), keyPEM...)
	if err := atomicfile.Write(s.CurrentPath(), data, 0o600); err != nil {
		return nil, err
	}
	return &pair, nil
}

// PendingKey is the key of a bootstrap request not yet answered, created on first use and
// kept across restarts so that a restarted agent waits for the same CSR.
func (s Store) PendingKey() (crypto.Signer, error) {
	path := filepath.Join(s.Dir, pendingKeyFile)
	if data, err := os.ReadFile(path); err == nil {
		if b, _ := pem.Decode(data); b != nil {
			if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
				if signer, ok := k.(crypto.Signer); ok {
					return signer, nil
				}
			}
		}
		// An unreadable pending key is replaced: it only ever named a request.
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// DropPendingKey forgets the pending key once its request is answered.
func (s Store) DropPendingKey() error {
	err := os.Remove(filepath.Join(s.Dir, pendingKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (s Store) mkdir() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	// The directory may predate us with a wider mode; keys must not be listable by others.
	return os.Chmod(s.Dir, 0o700)
}
