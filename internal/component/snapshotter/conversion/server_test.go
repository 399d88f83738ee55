package conversion

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func review(t *testing.T, to string, objs ...string) []byte {
	t.Helper()
	r := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: types.UID("req-1"), DesiredAPIVersion: to},
	}
	for _, s := range objs {
		b, err := obj(t, s).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		r.Request.Objects = append(r.Request.Objects, runtime.RawExtension{Raw: b})
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t *testing.T, h http.Handler, body []byte) (*httptest.ResponseRecorder, *apiextensionsv1.ConversionReview) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(body)))
	out := &apiextensionsv1.ConversionReview{}
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatal(err)
		}
	}
	return rec, out
}

// A review of two objects is answered with both converted, in order, under the request's UID.
func TestReview(t *testing.T) {
	rec, out := post(t, Handler(), review(t, V1beta1, beta2Content, plainBeta2))
	if rec.Code != http.StatusOK || out.Response == nil {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	rsp := out.Response
	if rsp.UID != "req-1" || rsp.Result.Status != metav1.StatusSuccess || len(rsp.ConvertedObjects) != 2 || out.Request != nil {
		t.Fatalf("response %+v", rsp)
	}
	for i, want := range []string{beta1Content, plainBeta1} {
		got := obj(t, string(rsp.ConvertedObjects[i].Raw))
		if w := obj(t, want); got.GetAPIVersion() != V1beta1 || !jsonEqual(t, got.Object, w.Object) {
			t.Errorf("object %d: %s", i, rsp.ConvertedObjects[i].Raw)
		}
	}
}

// One object that cannot be converted fails the whole review, with a message naming it.
func TestReviewFailure(t *testing.T) {
	broken := `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: broken, annotations: {groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: '{'}}
`
	_, out := post(t, Handler(), review(t, V1, plainBeta1, broken))
	rsp := out.Response
	if rsp == nil || rsp.Result.Status != metav1.StatusFailure || len(rsp.ConvertedObjects) != 0 || rsp.UID != "req-1" {
		t.Fatalf("response %+v", rsp)
	}
	if !strings.Contains(rsp.Result.Message, "VolumeGroupSnapshotContent broken") || !strings.Contains(rsp.Result.Message, InfoListAnnotation) {
		t.Errorf("message %q names neither the object nor the annotation", rsp.Result.Message)
	}
}

// What is not a v1 ConversionReview is refused with 400 and says what is expected.
func TestReviewBadRequests(t *testing.T) {
	v1beta1Review := strings.Replace(string(review(t, V1, plainBeta1)), "apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1", 1)
	for name, body := range map[string]string{"not JSON": "{", "no request": `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`, "v1beta1 review": v1beta1Review} {
		rec, _ := post(t, Handler(), []byte(body))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "ConversionReview") {
			t.Errorf("%s: %d %q", name, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/convert", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /convert: %d", rec.Code)
	}
}

// Serve answers over TLS with the files' certificate, serves a renewed certificate without a
// restart, and stops with its context.
func TestServeReloadsCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeCert(t, certFile, keyFile, "first")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, certFile, keyFile) }()
	get := func(pool *x509.CertPool) (string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		rsp, err := c.Get("https://" + l.Addr().String() + "/readyz")
		if err != nil {
			return "", err
		}
		defer rsp.Body.Close()
		b, err := io.ReadAll(rsp.Body)
		return string(b), err
	}
	if body, err := get(first); err != nil || body != "ok" {
		t.Fatalf("/readyz with the first certificate: %q %v", body, err)
	}
	// A later modification time, as a renewal a second later has.
	second := writeCert(t, certFile, keyFile, "second")
	later := time.Now().Add(2 * time.Second)
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if body, err := get(second); err != nil || body != "ok" {
		t.Fatalf("/readyz with the renewed certificate: %q %v", body, err)
	}
	if _, err := get(first); err == nil {
		t.Error("the first certificate is still served")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

// Serve refuses to start without a readable certificate.
func TestServeNeedsCertificate(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	err = Serve(context.Background(), l, filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key"))
	if err == nil || !strings.Contains(err.Error(), "none.crt") {
		t.Errorf("error %v, want one naming the certificate file", err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and returns a pool trusting it.
func writeCert(t *testing.T, certFile, keyFile, cn string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// jsonEqual compares two objects as JSON (the wire form the API server reads).
func jsonEqual(t *testing.T, a, b map[string]any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}
