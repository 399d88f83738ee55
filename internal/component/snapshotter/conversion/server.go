package conversion

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// maxReview bounds a ConversionReview body: the API server sends whole lists.
const maxReview = 64 << 20

// Handler serves upstream's paths: POST /convert (a ConversionReview of
// apiextensions.k8s.io/v1, the CRDs' conversionReviewVersions) and GET /readyz.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/convert", serveConvert)
	return mux
}

func serveConvert(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a ConversionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review := &apiextensionsv1.ConversionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		msg := fmt.Sprintf("the body is not a ConversionReview with a request: %v", err)
		klog.Error(msg)
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	if review.APIVersion != apiextensionsv1.SchemeGroupVersion.String() || review.Kind != "ConversionReview" {
		msg := fmt.Sprintf("unsupported %s %s: this webhook answers apiextensions.k8s.io/v1 ConversionReviews (conversionReviewVersions: [v1])", review.APIVersion, review.Kind)
		klog.Error(msg)
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	review.Response = convertRequest(review.Request)
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(review); err != nil {
		klog.ErrorS(err, "Writing the ConversionReview response")
	}
}

// convertRequest converts every object of req, or none: the API server takes one failure
// for the whole request, and shows the message to the client.
func convertRequest(req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	rsp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	for _, raw := range req.Objects {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw.Raw); err != nil {
			return failed(rsp, fmt.Sprintf("an object of the request is not a Kubernetes object: %v", err))
		}
		out, err := Convert(obj, req.DesiredAPIVersion)
		if err != nil {
			// The object's name is in the message: the API server adds the kind and versions.
			return failed(rsp, err.Error())
		}
		b, err := out.MarshalJSON()
		if err != nil {
			return failed(rsp, err.Error())
		}
		rsp.ConvertedObjects = append(rsp.ConvertedObjects, runtime.RawExtension{Raw: b})
	}
	rsp.Result = metav1.Status{Status: metav1.StatusSuccess}
	klog.V(4).InfoS("Converted", "uid", req.UID, "objects", len(req.Objects), "to", req.DesiredAPIVersion)
	return rsp
}

func failed(rsp *apiextensionsv1.ConversionResponse, msg string) *apiextensionsv1.ConversionResponse {
	klog.ErrorS(nil, "Conversion refused", "uid", rsp.UID, "reason", msg)
	rsp.ConvertedObjects = nil
	rsp.Result = metav1.Status{Status: metav1.StatusFailure, Message: msg}
	return rsp
}

// Serve serves Handler over TLS on l until ctx ends, with the certificate of certFile and
// keyFile, read again when either file changes (as upstream's certificate watcher does), so
// a renewed certificate needs no restart.
func Serve(ctx context.Context, l net.Listener, certFile, keyFile string) error {
	certs := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := certs.get(); err != nil {
		return fmt.Errorf("--tls-cert-file %s, --tls-private-key-file %s: %w", certFile, keyFile, err)
	}
	// Logged only now, so a webhook that cannot read its certificate never claims to serve.
	klog.InfoS("Serving the conversion webhook", "address", l.Addr().String(), "cert", certFile)
	srv := &http.Server{
		Handler:           Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return certs.get() },
		},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	err := srv.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// keyPair is a certificate and key read from files, read again when a file changes.
type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	version [2]time.Time
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var v [2]time.Time
	for i, f := range []string{k.certFile, k.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			if k.cert != nil {
				return k.cert, nil // being replaced: the last good pair serves meanwhile
			}
			return nil, err
		}
		v[i] = st.ModTime()
	}
	if k.cert != nil && v == k.version {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			// Tried again on the files' next change, not at every handshake.
			klog.ErrorS(err, "Reading the renewed certificate; serving the previous one", "cert", k.certFile, "key", k.keyFile)
			k.version = v
			return k.cert, nil
		}
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", k.certFile, k.keyFile, err)
	}
	if k.cert != nil {
		klog.InfoS("Serving the renewed certificate", "cert", k.certFile)
	}
	k.cert, k.version = &cert, v
	return k.cert, nil
}
