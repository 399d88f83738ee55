package framework

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// APIProxy stands between a component and the package's API server. It forwards every
// request as one identity (the admin impersonating it, so that the API server authorizes
// the request as that user, the Node authorizer included) and refuses the requests a test
// chooses with a 403, as the Node authorizer refuses a node a new pod's objects until its
// graph has the pod.
type APIProxy struct {
	// URL is the proxy's plain-HTTP address on the loopback.
	URL string

	mu      sync.Mutex
	refuse  func(*http.Request) bool
	refused []time.Time
}

// StartAPIProxy starts a proxy that forwards as user in groups; it stops with the test.
func StartAPIProxy(t testing.TB, user string, groups ...string) *APIProxy {
	t.Helper()
	admin := rest.CopyConfig(RESTConfig())
	admin.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	transport, err := rest.TransportFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &APIProxy{}
	forward := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// The identity is the proxy's: nothing the client sends may change it.
			r.Out.Header.Del("Authorization")
			for k := range r.Out.Header {
				if strings.HasPrefix(k, "Impersonate-") {
					r.Out.Header.Del(k)
				}
			}
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.refusing(r) {
			writeForbidden(w, user, r)
			return
		}
		forward.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.URL = "http://" + ln.Addr().String()
	return p
}

// Kubeconfig writes a kubeconfig that reaches the API server through the proxy.
func (p *APIProxy) Kubeconfig(t testing.TB) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.URL}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Refuse makes the proxy answer 403 to every request for which match returns true; nil
// refuses nothing.
func (p *APIProxy) Refuse(match func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = match
}

// Refused returns when each refused request came.
func (p *APIProxy) Refused() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.refused...)
}

func (p *APIProxy) refusing(r *http.Request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse == nil || !p.refuse(r) {
		return false
	}
	p.refused = append(p.refused, time.Now())
	return true
}

// writeForbidden answers as the Node authorizer does.
func writeForbidden(w http.ResponseWriter, user string, r *http.Request) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
		Message: "User \"" + user + "\" cannot " + r.Method + " " + r.URL.Path + ": no relationship found between node and this object",
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(st)
}
