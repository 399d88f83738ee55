package controller

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

func TestWriteFailedReportsOnlyRefusals(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}}
	gr := schema.GroupResource{Resource: "persistentvolumes"}
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"forbidden", apierrors.NewForbidden(gr, "pv-1", errors.New("RBAC: create not allowed")), true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolume"}, "pv-1", nil), true},
		{"conflict", apierrors.NewConflict(gr, "pv-1", errors.New("changed")), false},
		{"timeout", apierrors.NewServerTimeout(gr, "create", 1), false},
		{"plain", errors.New("connection refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			cfg := textlogger.NewConfig(textlogger.Output(&buf), textlogger.Verbosity(0))
			ctx := klog.NewContext(context.Background(), textlogger.NewLogger(cfg))
			rec := record.NewFakeRecorder(4)
			err := WriteFailed(ctx, rec, claim, "create", "persistentvolumes", tc.err)
			if !errors.Is(err, tc.err) {
				t.Errorf("returned %v, want the error itself", err)
			}
			lines := strings.Count(buf.String(), "\n")
			if !tc.refused {
				if lines != 0 || len(rec.Events) != 0 {
					t.Errorf("not a refusal, yet %d lines and %d events: %s", lines, len(rec.Events), buf.String())
				}
				return
			}
			if lines != 1 || !strings.Contains(buf.String(), `key="ns/data"`) || !strings.Contains(buf.String(), `verb="create"`) || !strings.Contains(buf.String(), `resource="persistentvolumes"`) {
				t.Errorf("want one line naming the key, the verb and the resource, got %q", buf.String())
			}
			if len(rec.Events) != 1 {
				t.Fatalf("%d events, want 1", len(rec.Events))
			}
			if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning WriteFailed cannot create persistentvolumes: ") {
				t.Errorf("event %q", ev)
			}
		})
	}
}
