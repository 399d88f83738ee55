package redact

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// LogFilter is the klog.LogFilter every kubevol command installs (klog.SetLogFilter), so
// that no verbosity puts a secret in a log line. klog applies it to every line that passes
// the verbosity check, from klog's functions and from the logr loggers that klog.Background,
// klog.FromContext and klog.NewKlogr return, with the values of WithValues included. (A
// logger with another sink would bypass it; kubevol sets none.)
//
// Why a filter: client-go v0.37 logs request and response bodies itself, through the logger
// of the request's context (rest.Request logBody: "Request Body" and "Response Body" with
// key "body", at V(8) up to 1 KiB, V(9) up to 10 KiB, V(10) whole, as a hex dump when the
// body is binary; from Do, DoRaw, Watch, Stream and transformResponse). The verbosity cannot
// be capped per file (-v enables a level for every file; -vmodule can only raise it), and a
// transport wrapper runs below rest.Request and cannot stop it. So the filter replaces the
// body unless it is a JSON object whose top-level kind is known and harmless: the bodies
// of Secrets, TokenRequests, TokenReviews, of lists and tables that can hold them, patches
// (no kind), protobuf (hex dump) and bodies truncated before their kind are all replaced.
// client-go's other debug lines (round_trippers at V(6)-V(9): URL, headers, curl command)
// carry no body, and mask the Authorization header themselves ("Bearer <masked>").
//
// Besides: CSI messages (proto) are formatted by CSI, Secret and TokenRequest objects are
// reduced to their names, byte slices and maps under a key that names a secret or token are
// replaced, and anything shaped like a JWT (a service-account token) is cut out of every
// message and value. klog does not filter the error of an error line (errorS passes only
// the message and the values to FilterS), so an error is covered only as a value.
type LogFilter struct{}

var _ klog.LogFilter = LogFilter{}

// Filter implements klog.LogFilter for klog.Info and friends.
func (LogFilter) Filter(args []any) []any {
	return filterValues(args, func(int) string { return "" })
}

// FilterF implements klog.LogFilter for klog.Infof and friends.
func (LogFilter) FilterF(format string, args []any) (string, []any) {
	return cutJWTs(format), filterValues(args, func(int) string { return "" })
}

// FilterS implements klog.LogFilter for structured lines: klog.InfoS and every logr call.
func (LogFilter) FilterS(msg string, kvs []any) (string, []any) {
	bodyLine := msg == "Request Body" || msg == "Response Body"
	key := func(i int) string {
		if i%2 == 0 {
			return "" // a key, or a value without a key
		}
		k, _ := kvs[i-1].(string)
		return k
	}
	out := cow{in: kvs}
	for i := 1; i < len(kvs); i += 2 {
		if s, ok := kvs[i].(string); ok && bodyLine && key(i) == "body" {
			if reason := unsafeBody(s); reason != "" {
				out.set(i, "<redacted by kubevol: "+reason+">")
				continue
			}
		}
	}
	return cutJWTs(msg), filterValues(out.slice(), key)
}

// cow copies a slice on its first change: most lines have nothing to filter.
type cow struct{ in, out []any }

func (c *cow) set(i int, v any) {
	if c.out == nil {
		c.out = append([]any(nil), c.in...)
	}
	c.out[i] = v
}

func (c *cow) slice() []any {
	if c.out == nil {
		return c.in
	}
	return c.out
}

// filterValues replaces what must not be logged, copying args only when it changes one.
func filterValues(args []any, key func(int) string) []any {
	out := cow{in: args}
	for i, v := range args {
		if nv, changed := filterValue(key(i), v); changed {
			out.set(i, nv)
		}
	}
	return out.slice()
}

// secretKey matches log keys whose map or byte values are secret data.
var secretKey = regexp.MustCompile(`(?i)secret|token|password|credential`)

func filterValue(key string, v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return v, false
	case string:
		if c := cutJWTs(x); c != x {
			return c, true
		}
	case []byte:
		if secretKey.MatchString(key) {
			return fmt.Sprintf("<redacted %d bytes>", len(x)), true
		}
		if s := string(x); cutJWTs(s) != s {
			return cutJWTs(s), true
		}
	case error:
		if m := x.Error(); cutJWTs(m) != m {
			return errors.New(cutJWTs(m)), true
		}
	case proto.Message:
		return CSI(x), true
	case *corev1.Secret:
		return redactedObject("Secret", x), true
	case corev1.Secret:
		return redactedObject("Secret", &x), true
	case *corev1.SecretList, corev1.SecretList:
		return "<SecretList redacted>", true
	case *authenticationv1.TokenRequest:
		return redactedObject("TokenRequest", x), true
	case authenticationv1.TokenRequest:
		return redactedObject("TokenRequest", &x), true
	case *authenticationv1.TokenReview, authenticationv1.TokenReview:
		return "<TokenReview redacted>", true
	case map[string][]byte:
		return fmt.Sprintf("<redacted map of %d entries>", len(x)), true
	case map[string]string:
		if secretKey.MatchString(key) {
			return fmt.Sprintf("<redacted map of %d entries>", len(x)), true
		}
		for k, s := range x {
			if isTokensKey(k) || cutJWTs(s) != s {
				return redactedStringMap(x), true
			}
		}
	}
	return v, false
}

func redactedObject(kind string, obj klog.KMetadata) string {
	if obj == nil {
		return "<" + kind + " nil>"
	}
	return fmt.Sprintf("<%s %s redacted>", kind, klog.KObj(obj))
}

func redactedStringMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if isTokensKey(k) {
			v = Stripped
		}
		out[k] = cutJWTs(v)
	}
	return out
}

// jwt matches a JSON Web Token in compact form, as service-account tokens are: three
// base64url parts, the first two JSON objects (so starting "eyJ", the encoding of `{"`).
var jwt = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)

func cutJWTs(s string) string {
	if !strings.Contains(s, "eyJ") {
		return s // the common case costs no regexp
	}
	return jwt.ReplaceAllString(s, Stripped)
}

// Kinds whose bodies hold secret data, or can hold objects that do.
var unsafeKinds = map[string]bool{
	"Secret": true, "SecretList": true, "TokenRequest": true, "TokenReview": true,
	"List": true, "Table": true, "WatchEvent": true,
}

// nestedUnsafeKind finds a secret kind inside a body (an item of a list of another kind).
var nestedUnsafeKind = regexp.MustCompile(`"kind"\s*:\s*"(Secret|SecretList|TokenRequest|TokenReview)"`)

// unsafeBody tells why an API body must not be logged, or "" if it may. It fails closed:
// only a JSON object whose top-level kind is read before any truncation and is not one of
// unsafeKinds passes (the API server and client-go write kind first).
func unsafeBody(body string) string {
	d := json.NewDecoder(strings.NewReader(body))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return "not a JSON object"
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if tok == "kind" {
			var kind string
			if err := d.Decode(&kind); err != nil {
				break
			}
			if unsafeKinds[kind] {
				return "body of a " + kind
			}
			if m := nestedUnsafeKind.FindStringSubmatch(body); m != nil {
				return "body holding a " + m[1]
			}
			return ""
		}
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			break
		}
	}
	return "body without a kind"
}
