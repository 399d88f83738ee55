package driver

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/klog/v2"
)

var fieldPathRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

func checkFieldPath(p string) error {
	if !fieldPathRE.MatchString(p) {
		return fmt.Errorf("clear %q: want a dotted path of CSI field names, such as volume_capability.mount.mount_flags", p)
	}
	return nil
}

// clearFields returns the request with the Clear field of the rules matching method
// cleared, on a copy: the caller's message is left alone.
func (f *faults) clearFields(ctx context.Context, method string, req any) any {
	if f == nil {
		return req
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return req
	}
	var cleared proto.Message
	for _, r := range f.rules {
		if (r.Method != "*" && r.Method != method) || r.Clear == "" {
			continue
		}
		if cleared == nil {
			cleared = proto.Clone(msg)
		}
		if clearPath(cleared.ProtoReflect(), strings.Split(r.Clear, ".")) {
			klog.FromContext(ctx).Info("Injected fault: request field cleared", "field", r.Clear)
		}
	}
	if cleared == nil {
		return req
	}
	return cleared
}

// clearPath clears the field at path below m and reports whether it was set.
func clearPath(m protoreflect.Message, path []string) bool {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(path[0]))
	if fd == nil || !m.Has(fd) {
		return false
	}
	if len(path) == 1 {
		m.Clear(fd)
		return true
	}
	if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
		return false
	}
	return clearPath(m.Mutable(fd).Message(), path[1:])
}
