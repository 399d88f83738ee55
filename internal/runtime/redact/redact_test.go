package redact

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// A JWT-shaped token, as the TokenRequest API returns.
const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bnM6c2EifQ.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"

func TestCSIStripsTokensAndSecrets(t *testing.T) {
	tokens := `{"vault":{"token":"` + token + `","expirationTimestamp":"2030-01-01T00:00:00Z"}}`
	req := &csi.NodePublishVolumeRequest{
		VolumeId: "vol-1", TargetPath: "/t",
		VolumeContext: map[string]string{TokensKey: tokens, "size": "1Mi"},
		Secrets:       map[string]string{"password": "hunter2-secret"},
	}
	got := CSI(req).String()
	for _, leak := range []string{token, "hunter2-secret", "vault"} {
		if strings.Contains(got, leak) {
			t.Errorf("sanitized request %s contains %q", got, leak)
		}
	}
	for _, want := range []string{`"volume_id":"vol-1"`, `"size":"1Mi"`, `"secrets":"***stripped***"`, `"csi.storage.k8s.io/serviceAccount.tokens":"***stripped***"`} {
		if !strings.Contains(got, want) {
			t.Errorf("sanitized request %s lacks %s", got, want)
		}
	}
	if req.VolumeContext[TokensKey] != tokens {
		t.Error("sanitizing changed the request itself")
	}

	// Another spelling, and a token map inside a nested message.
	resp := &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v", VolumeContext: map[string]string{strings.ToUpper(TokensKey): token}}}
	if got := CSI(resp).String(); strings.Contains(got, token) || !strings.Contains(got, `"volume_id":"v"`) {
		t.Errorf("sanitized response = %s", got)
	}
	// Secrets only: protosanitizer alone.
	stage := &csi.NodeStageVolumeRequest{VolumeId: "v", Secrets: map[string]string{"k": "stage-secret"}}
	if got := CSI(stage).String(); strings.Contains(got, "stage-secret") {
		t.Errorf("sanitized stage request = %s", got)
	}
	if got := CSI(nil).String(); got != "null" {
		t.Errorf("CSI(nil) = %q", got)
	}
	if got := CSI((*csi.NodePublishVolumeRequest)(nil)).String(); got != "{}" {
		t.Errorf("CSI(typed nil) = %q", got)
	}
	// A value that is no CSI message is never printed whole.
	if got := CSI(map[string]string{"password": "x"}).String(); strings.Contains(got, "password") {
		t.Errorf("CSI(map) = %q", got)
	}
}

func TestLogFilterValues(t *testing.T) {
	f := LogFilter{}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"k": []byte("data-secret")}}
	tr := &authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sa"}, Status: authenticationv1.TokenRequestStatus{Token: "opaque-token"}}
	in := []any{
		"secret", secret, "secretValue", *secret, "tr", tr,
		"req", &csi.NodePublishVolumeRequest{Secrets: map[string]string{"k": "csi-secret"}},
		"err", errors.New("mount failed: bearer " + token),
		"note", "token " + token + " here",
		"secrets", map[string]string{"k": "map-secret"},
		"attributes", map[string]string{TokensKey: "{json-with-token}", "size": "1Mi"},
		"data", map[string][]byte{"k": []byte("bytes-secret")},
		"tokenBytes", []byte("raw-token-bytes"),
		"pod", "ns/p", "count", 3,
	}
	orig := append([]any(nil), in...)
	msg, out := f.FilterS("Publishing "+token, in)
	line := msg + " " + klogFormat(out)
	for _, leak := range []string{token, "data-secret", "opaque-token", "csi-secret", "map-secret", "json-with-token", "bytes-secret", "raw-token-bytes"} {
		if strings.Contains(line, leak) {
			t.Errorf("filtered line contains %q: %s", leak, line)
		}
	}
	for _, want := range []string{"ns/creds", "ns/sa", "ns/p", "size:1Mi", "3"} {
		if !strings.Contains(line, want) {
			t.Errorf("filtered line lacks %q: %s", want, line)
		}
	}
	for i := range in {
		if in[i] != nil && !sameValue(in[i], orig[i]) {
			t.Errorf("FilterS changed its argument %d", i)
		}
	}
	if in[15].(map[string]string)[TokensKey] != "{json-with-token}" {
		t.Error("FilterS changed a logged map")
	}
	// A line with nothing to filter is passed through without a copy.
	plain := []any{"pod", "ns/p", "count", 3}
	if _, out := f.FilterS("Volume mounted", plain); &out[0] != &plain[0] {
		t.Error("a clean line was copied")
	}
	if s, args := f.FilterF("token %s", []any{token}); strings.Contains(s, "eyJ") || strings.Contains(klogFormat(args), token) {
		t.Errorf("FilterF = %q %v", s, args)
	}
	if args := f.Filter([]any{"x", errors.New(token)}); strings.Contains(klogFormat(args), token) {
		t.Errorf("Filter = %v", args)
	}
}

func sameValue(a, b any) bool { return reflect.DeepEqual(a, b) }

func klogFormat(kvs []any) string {
	var b strings.Builder
	for _, v := range kvs {
		switch x := v.(type) {
		case interface{ String() string }:
			b.WriteString(x.String())
		case error:
			b.WriteString(x.Error())
		default:
			b.WriteString(strings.TrimSpace(strings.ReplaceAll(fmtAny(x), "\n", " ")))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

func TestUnsafeBody(t *testing.T) {
	for body, unsafe := range map[string]bool{
		`{"kind":"ConfigMap","apiVersion":"v1","data":{"a":"b"}}`:                        false,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}`:                       false,
		`{"kind":"PodList","items":[{"kind":"Secret","data":{}}]}`:                       true,
		`{"kind":"Secret","apiVersion":"v1","data":{"k":"czNjcmV0"}}`:                    true,
		`{"kind":"SecretList","items":[]}`:                                               true,
		`{"kind":"TokenRequest","status":{"token":"x"}}`:                                 true,
		`{"kind":"TokenReview","spec":{"token":"x"}}`:                                    true,
		`{"kind":"List","items":[]}`:                                                     true,
		`{"kind":"Table","rows":[]}`:                                                     true,
		`{"data":{"k":"czNjcmV0"}}`:                                                      true, // a patch
		`{"metadata":{"name":"s"},"data":{"k":"czNjcmV0"} [truncated 99 chars]`:          true,
		`{"kind" [truncated 99 chars]`:                                                   true,
		"00000000  6b 38 73 00 0a 0c 0a 02  76 31 12 06 53 65 63 72  |k8s.....v1..Secr|": true,
		`apiVersion: v1`: true,
		``:               true,
	} {
		if got := unsafeBody(body) != ""; got != unsafe {
			t.Errorf("unsafeBody(%q) = %q, want unsafe=%v", body, unsafeBody(body), unsafe)
		}
	}
}

// client-go's own body logging at -v=10, against a fake API server, with and without the
// filter: the unfiltered run proves that this client-go logs what the filter must catch.
func TestLogFilterCoversClientGoBodies(t *testing.T) {
	const secretValue = "client-go-secret-value-5f2c"
	const bearer = "bearer-credential-9d1e"
	srv := fakeAPIServer(t, secretValue)

	var logs syncBuffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"v": "10", "logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	klog.SetOutput(&logs)
	t.Cleanup(func() {
		klog.SetLogFilter(nil)
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
	})

	encoded := base64.StdEncoding.EncodeToString([]byte(secretValue))
	run := func(contentType string) {
		// The debugging transport is chosen when the client is made, at -v>=6.
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: bearer, ContentConfig: rest.ContentConfig{ContentType: contentType}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := cs.CoreV1().Secrets("ns").Get(ctx, "creds", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets("ns").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Data: map[string][]byte{"k": []byte(secretValue)}}
		if _, err := cs.CoreV1().Secrets("ns").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"stringData":{"k":"` + secretValue + `"}}`)
		if _, err := cs.CoreV1().Secrets("ns").Patch(ctx, "creds", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "plain", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leaked := func() []string {
		var out []string
		text := logs.String()
		for _, s := range []string{secretValue, encoded, token, bearer} {
			if strings.Contains(text, s) {
				out = append(out, s)
			}
		}
		// A protobuf body is logged as a hex dump: 16 bytes of text per line.
		if strings.Contains(text, secretValue[:16]) || strings.Contains(text, secretValue[16:]) {
			out = append(out, "part of "+secretValue)
		}
		return out
	}

	contentTypes := []string{"application/json", "application/vnd.kubernetes.protobuf"}
	for _, ct := range contentTypes {
		logs.Reset()
		run(ct)
		if got := leaked(); len(got) == 0 || !strings.Contains(logs.String(), "Response Body") {
			t.Fatalf("%s: without the filter, client-go logged no body with a secret; the test proves nothing:\n%s", ct, logs.String())
		}
	}
	for _, ct := range contentTypes {
		logs.Reset()
		klog.SetLogFilter(LogFilter{})
		run(ct)
		if got := leaked(); len(got) > 0 {
			t.Errorf("%s: the log holds %q:\n%s", ct, got, logs.String())
		}
		text := logs.String()
		// The filter must not blind the logs: harmless bodies and the masked header stay.
		if ct == "application/json" && !strings.Contains(text, `"kind":"ConfigMap"`) {
			t.Errorf("%s: the ConfigMap body was not logged:\n%s", ct, text)
		}
		if !strings.Contains(text, "Bearer <masked>") || !strings.Contains(text, "redacted by kubevol") {
			t.Errorf("%s: no masked header or no redaction note:\n%s", ct, text)
		}
	}
}

// fakeAPIServer answers the few calls of the test, in JSON or protobuf as asked.
func fakeAPIServer(t *testing.T, secretValue string) *httptest.Server {
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	json := runtime.Encoder(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion, authenticationv1.SchemeGroupVersion))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"k": []byte(secretValue)}}
		var obj runtime.Object
		switch {
		case strings.HasSuffix(r.URL.Path, "/serviceaccounts/sa/token"):
			obj = &authenticationv1.TokenRequest{TypeMeta: metav1.TypeMeta{Kind: "TokenRequest", APIVersion: "authentication.k8s.io/v1"},
				Status: authenticationv1.TokenRequestStatus{Token: token}}
		case strings.HasSuffix(r.URL.Path, "/configmaps/plain"):
			obj = &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}, Data: map[string]string{"a": "b"}}
		case strings.HasSuffix(r.URL.Path, "/secrets"):
			if r.Method == http.MethodGet {
				obj = &corev1.SecretList{TypeMeta: metav1.TypeMeta{Kind: "SecretList", APIVersion: "v1"}, Items: []corev1.Secret{*secret}}
			} else {
				obj = secret
			}
		default:
			obj = secret
		}
		var buf bytes.Buffer
		enc, ct := json, "application/json"
		if strings.Contains(r.Header.Get("Accept"), "protobuf") {
			enc, ct = pb, "application/vnd.kubernetes.protobuf"
		}
		if err := enc.Encode(obj, &buf); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(buf.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func fmtAny(v any) string { return fmt.Sprint(v) }
