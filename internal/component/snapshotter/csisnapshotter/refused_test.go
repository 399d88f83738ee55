package csisnapshotter

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// A content write the API server refuses fails the sync, for the queue to retry with
// backoff, with a Warning event on the content naming the write.
func TestRefusedWriteWarns(t *testing.T) {
	f := newFixture(t, preProvisioned("c1"))
	f.snap.PrependReactor("patch", "volumesnapshotcontents", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents/status"}, "c1", errors.New("RBAC: patch not allowed"))
	})
	if err := f.sync("c1"); !apierrors.IsForbidden(err) {
		t.Fatalf("sync: %v, want the refusal for the queue's backoff", err)
	}
	var warned int
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning "+controller.ReasonWriteFailed+" ") {
			warned++
			if !strings.Contains(e, "cannot patch volumesnapshotcontents/status") || !strings.Contains(e, "forbidden") {
				t.Errorf("event %q, want one naming the refused write and the cause", e)
			}
		}
	}
	if warned != 1 {
		t.Errorf("%d WriteFailed events for one refused write, want 1", warned)
	}
}
