// Package redact keeps secrets out of logs: one sanitizer for CSI messages, shared by the
// CSI client (sidecars, node agent) and the driver, and a klog filter that every kubevol
// command installs.
package redact

import (
	"fmt"
	"strings"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TokensKey is where the kubelet puts the service-account tokens of CSIDriver.tokenRequests:
// in volume_context, or (serviceAccountTokenInSecrets) in secrets.
const TokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// Stripped replaces a secret value, as protosanitizer writes it.
const Stripped = "***stripped***"

// CSI formats a CSI message for a log line, lazily: the fields the CSI spec marks
// csi_secret are stripped by protosanitizer (as the kubernetes-csi sidecars log), and so
// is TokensKey in any string map (volume_context is not a csi_secret field, yet it carries
// the tokens when the CSIDriver leaves serviceAccountTokenInSecrets unset).
func CSI(msg any) fmt.Stringer { return csiMessage{msg} }

type csiMessage struct{ msg any }

func (m csiMessage) String() string {
	if m.msg == nil {
		return "null"
	}
	pm, ok := m.msg.(proto.Message)
	if !ok {
		// protosanitizer would print any other value whole.
		return fmt.Sprintf("<%T>", m.msg)
	}
	if pm.ProtoReflect().IsValid() && hasTokens(pm.ProtoReflect()) {
		pm = proto.Clone(pm)
		stripTokens(pm.ProtoReflect())
	}
	return protosanitizer.StripSecrets(pm).String()
}

// isTokensKey also matches other spellings: a key that merely differs in case is no less
// a token to whoever reads the log.
func isTokensKey(k string) bool { return strings.EqualFold(k, TokensKey) }

// hasTokens reports whether a string map anywhere in msg holds TokensKey.
func hasTokens(msg protoreflect.Message) bool {
	found := false
	walkStringMaps(msg, func(m protoreflect.Map) {
		m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			found = found || isTokensKey(k.String())
			return !found
		})
	})
	return found
}

func stripTokens(msg protoreflect.Message) {
	walkStringMaps(msg, func(m protoreflect.Map) {
		var keys []protoreflect.MapKey
		m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			if isTokensKey(k.String()) {
				keys = append(keys, k)
			}
			return true
		})
		for _, k := range keys {
			m.Set(k, protoreflect.ValueOfString(Stripped))
		}
	})
}

// walkStringMaps calls f for every populated map<string, string> field of msg and of the
// messages it holds.
func walkStringMaps(msg protoreflect.Message, f func(protoreflect.Map)) {
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapKey().Kind() == protoreflect.StringKind && fd.MapValue().Kind() == protoreflect.StringKind {
				f(v.Map())
			} else if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walkStringMaps(mv.Message(), f)
					return true
				})
			}
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				walkStringMaps(v.List().Get(i).Message(), f)
			}
		case fd.Message() != nil:
			walkStringMaps(v.Message(), f)
		}
		return true
	})
}
